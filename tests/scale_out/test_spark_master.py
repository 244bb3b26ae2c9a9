"""A Spark master that cannot be reached fails the job at once, in one line naming its URL.

Before any work: no job server JVM is started, no output folder is made. (Without the check, Beam's Spark
job server starts, and Spark's client then retries the registration for minutes: the command hung.)
Needs no Java: it runs with the unit tests.
"""

import pytest

import imaging
import in_process
import said
import scaleout


@pytest.mark.parametrize("command", ["beam_pipeline", "beam_pipeline.predict"])
def test_unreachable_spark_master_is_one_line_naming_it(tmp_path, command):
    port = scaleout.free_port()  # Nothing listens there.
    url = f"spark://127.0.0.1:{port}"
    imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [["a.jpg", "x"]])
    if command == "beam_pipeline":
        args = ["--input_csv", tmp_path / "in.csv", "--output_dir", tmp_path / "out"]
    else:
        args = ["--model_dir", tmp_path / "export", "--input_dir", tmp_path / "in", "--output_dir", tmp_path / "out",
                "--database", "none"]
    result = in_process.run_module(command, *args, "--runner=SparkRunner", "--spark_master_url", url,
                                   "--environment_type=EXTERNAL", "--environment_config=localhost:1")
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = said.problems(result.stderr)
    assert line.startswith(f"error: cannot reach the Spark master {url} (127.0.0.1:{port}: "), line
    assert not (tmp_path / "out").exists()


def test_spark_runs_get_the_cached_job_server_and_its_executor_classpath(tmp_path):
    """`--runner SparkRunner` on a loopback master gets what scripts/spark_job_server.sh cached; a remote master
    keeps Beam's staging; what the user gives wins; other runners are left alone."""
    from beam_pipeline.common import spark

    launcher = tmp_path / "launcher-1-spark-3.5.0"
    (launcher / "lib").mkdir(parents=True)
    (launcher / "launcher.jar").write_bytes(b"")
    environ = {"SPARK_JARS_CACHE": str(tmp_path)}
    jar, lib = launcher / "launcher.jar", launcher / "lib"

    local = spark.with_defaults(["--runner=SparkRunner", "--spark_master_url=spark://127.0.0.1:7077"], environ)
    assert local[2:] == [f"--spark_job_server_jar={jar}", f"--files_to_stage={jar}",
                         f"--job_server_jvm_property=-Dspark.executor.extraClassPath={lib}/*",
                         "--job_server_jvm_property=-Dspark.driver.host=127.0.0.1", spark.ENVIRONMENT_CACHE]
    remote = spark.with_defaults(["--runner", "SparkRunner", "--spark_master_url", "spark://spark-1:7077"], environ)
    assert remote[4:] == [f"--spark_job_server_jar={jar}", spark.ENVIRONMENT_CACHE]
    given = ["--runner=SparkRunner", "--spark_master_url=spark://localhost:7077",
             f"--spark_job_server_jar={tmp_path / 'x.jar'}", "--environment_cache_millis=0"]
    assert spark.with_defaults(given, environ) == given  # No lib/ beside x.jar: nothing of the launcher's.
    assert spark.with_defaults(["--runner=FlinkRunner"], environ) == ["--runner=FlinkRunner"]
    assert spark.master_addresses("spark://a:1,b") == [("a", 1), ("b", 7077)]
