"""The whole job on Apache Flink (embedded cluster, Beam's Flink job server) equals the local runner's output.

Runs only where FLINK_JOB_SERVER_JAR names a Beam Flink job server jar (any: the official
one or the launcher built by scripts/flink_job_server.sh): `scripts/flink_integration_test.sh`
obtains it with Maven and runs this file as a separate step of scripts/test.sh (it needs
Java and a ~150 MB download once). Elsewhere it is skipped.

The job runs on an embedded Flink cluster (`--flink_master=[local]`, inside the job
server's JVM) with its Python SDK workers in a separate worker pool (EXTERNAL
environment), as a standing cluster's task managers would run them: they share nothing
with the launching process, not even its working directory.
"""

import os
import sys

import pytest

import scaleout

JAR = os.environ.get("FLINK_JOB_SERVER_JAR", "")
JAR = os.path.abspath(JAR) if JAR else ""  # The job runs from another folder.
# A stuck job (e.g. workers that cannot start) fails after this many seconds instead of
# blocking CI; a healthy run takes about a minute.
TIMEOUT = int(os.environ.get("FLINK_TEST_TIMEOUT", "480"))

pytestmark = pytest.mark.skipif(
    not JAR, reason="FLINK_JOB_SERVER_JAR is not set: run scripts/flink_integration_test.sh")


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory):
    """The endpoint of a Beam worker pool on a free localhost port, stopped (workers too) afterwards."""
    folder = tmp_path_factory.mktemp("flink_worker_pool")
    # The pool starts each worker with the `python` found on PATH: the venv's.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    port = scaleout.free_port()
    pool = scaleout.start_server(
        [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
        port, folder / "worker_pool.log", env=env, cwd=folder)
    try:
        yield f"localhost:{port}"
    finally:
        scaleout.stop_server(pool)


def test_embedded_flink_matches_the_local_runner(small_run, worker_pool):
    assert os.path.isfile(JAR), JAR
    folder = small_run.folder
    # Relative --input_csv and --output_dir, from the data folder: the workers run elsewhere.
    result = scaleout.run_job_killing_group(
        os.path.relpath(small_run.csv_path, folder), "out_flink_embedded",
        "--runner=FlinkRunner", "--flink_master=[local]", f"--flink_job_server_jar={JAR}",
        "--environment_type=EXTERNAL", f"--environment_config={worker_pool}", scaleout.FLINK_ENVIRONMENT_CACHE,
        *scaleout.small_step_flags(folder),
        cwd=folder, timeout=TIMEOUT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    scaleout.assert_small_dataset_run_matches(small_run.local, folder / "out_flink_embedded", small_run.rows,
                                              "FlinkRunner")
