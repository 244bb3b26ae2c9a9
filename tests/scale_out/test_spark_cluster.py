"""The job and the predict job on a standing Spark cluster (scripts/spark_cluster.sh) equal the local runs.

Runs only where SPARK_JOB_SERVER_JAR names the launcher that scripts/spark_job_server.sh builds (Spark's
jars beside it): `scripts/flink_integration_test.sh` runs this file after the Flink ones. Elsewhere it is
skipped.

The cluster is laid out as a real one: a master, two workers of one core each whose executors run
Spark's jars plus Beam's runner (from the launcher's lib/: beam_pipeline/common/spark.py), and beside each
worker a Beam worker pool of its own that starts the Python SDK workers. The job is submitted with the
flags a user gives (`--runner=SparkRunner --spark_master_url=URL --environment_type=EXTERNAL
--environment_config=beam-worker-pool:PORT`, the job server jar): what else Spark needs the command adds.

Each job costs a job server JVM, executors and SDK workers, so a job carries several checks: the run with a
worker killed is also the check that the cluster's output equals the local runner's (through the small
dataset's steps, on both workers), and the predict job reads that run's output. Their references are the
local runs the Flink tests use too (small_run, small_predictions): Spark adds no local run to the step.
"""

import json
import os
import signal
import time
import urllib.request

import pytest

import outputs
import scaleout
from tf_serving_input.layout import OutputLayout

JAR = os.environ.get("SPARK_JOB_SERVER_JAR", "")
JAR = os.path.abspath(JAR) if JAR else ""
TIMEOUT = int(os.environ.get("FLINK_TEST_TIMEOUT", "480"))
SCRIPT = os.path.join(outputs.REPO_ROOT, "scripts", "spark_cluster.sh")
WORKERS = ("worker-1", "worker-2")

pytestmark = pytest.mark.skipif(
    not JAR, reason="SPARK_JOB_SERVER_JAR is not set: run scripts/flink_integration_test.sh")


class SparkCluster(scaleout.ScriptedCluster):
    """A cluster started by scripts/spark_cluster.sh in `folder`: its master URL, pools, web UI and logs."""

    script = SCRIPT

    def __init__(self, folder, env):
        super().__init__(folder, env)
        self.master_url = self.environment_config = self.ui = None

    def start(self):
        """Starts the cluster, or restarts what of it is missing; fails the test with its logs."""
        result = self._script("start")
        assert result.returncode == 0, f"spark_cluster.sh start failed:\n{result.stderr[-12000:]}"
        *lines, self.master_url = result.stdout.split()
        assert self.master_url.startswith("spark://127.0.0.1:"), result.stdout
        endpoints = dict(line.split("=", 1) for line in lines)
        self.environment_config = endpoints["SPARK_ENVIRONMENT_CONFIG"]
        self.ui = endpoints["SPARK_MASTER_UI"]

    def job_flags(self):
        """The Beam flags a user gives to run a job on this cluster."""
        return ("--runner=SparkRunner", f"--spark_master_url={self.master_url}", f"--spark_job_server_jar={JAR}",
                "--environment_type=EXTERNAL", f"--environment_config={self.environment_config}")

    def state(self):
        """The master's view: workers, running and completed applications."""
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=30) as response:
            return json.load(response)

    def applications(self):
        """{application id: its summary} of every application the master has run."""
        state = self.state()
        return {app["id"]: app for app in state["activeapps"] + state["completedapps"]}

    def executors_of(self, application):
        """The worker folders that ran an executor of `application` (each worker keeps one folder per app)."""
        return sorted(name for name in WORKERS if os.path.isdir(os.path.join(self.folder, name, "work", application)))

    def log_files(self):
        return [os.path.join(root, name) for root, _, names in os.walk(self.folder)
                for name in sorted(names) if name.endswith((".log", "stderr"))]


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster of two workers, each with its own worker pool, stopped afterwards."""
    folder = os.environ.get("SPARK_TEST_CLUSTER_DIR") or str(tmp_path_factory.mktemp("spark_cluster"))
    cluster = SparkCluster(folder, dict(os.environ, SPARK_CLUSTER_DIR=folder, SPARK_WORKERS=str(len(WORKERS))))
    try:
        cluster.start()
        yield cluster
    finally:
        stopped = cluster.stop()
        assert stopped.returncode == 0, stopped.stderr


def test_killed_worker_is_replaced_by_spark_and_the_predict_job_reads_the_output(small_run, small_predictions,
                                                                                 spark_cluster):
    """The small dataset's job with one worker SIGKILLed (its daemon and its executor, as a lost machine) as soon
    as its first shard is written, then the predict job over that job's output: both equal the local runs.

    What happens: Spark re-runs the lost executor's tasks on the other worker (a lost worker does not count
    against `spark.task.maxFailures`), so the job finishes; the shards written before the kill stay, and the
    output equals the local runner's (small_run), through the small dataset's steps, with both workers having
    run an executor. (Flink, without a restart strategy, fails the job instead and the same command resumes:
    test_flink_cluster.py. Either way the user ends with a complete output identical to the local run's.)
    The predict job then reads the Spark run's output and must predict what the local predict run predicted
    over the local output (small_predictions): one job's output is the next one's input, as a user runs them,
    and neither needs a local run of its own.
    """
    cluster, folder = spark_cluster, small_run.folder
    out = folder / "out_spark"
    job = (os.path.relpath(small_run.csv_path, folder), out.name, *scaleout.small_step_flags(folder),
           *cluster.job_flags())
    apps_before = set(cluster.applications())

    process = scaleout.start_job(*job, cwd=folder)
    status_dir = out / OutputLayout.STATUS_DIR
    deadline = time.monotonic() + TIMEOUT
    while process.poll() is None and time.monotonic() < deadline and not list(status_dir.glob("*.json")):
        time.sleep(0.02)
    killed = process.poll() is None and bool(list(status_dir.glob("*.json")))
    if killed:
        scaleout.signal_group(cluster.pid("worker-1"), signal.SIGKILL)  # The worker and its executor.
        finished = {path.name: path.stat().st_mtime_ns for path in status_dir.glob("*.json")}
    result = scaleout.finish_job(process, timeout=TIMEOUT if killed else 1)
    assert killed, "the job ended before writing any shard\n" + cluster.explain(result)
    assert result.returncode == 0, cluster.explain(result)

    [application] = [app for app_id, app in cluster.applications().items() if app_id not in apps_before]
    assert application["state"] == "FINISHED", application
    assert cluster.executors_of(application["id"]) == list(WORKERS), cluster.logs()  # Both ran an executor.
    # The shards finished before the kill were not written again; no attempt's temporary file is left.
    assert all((status_dir / name).stat().st_mtime_ns == mtime for name, mtime in finished.items())
    assert not list(out.rglob("*.incomplete"))
    scaleout.assert_small_dataset_run_matches(small_run.local, out, small_run.rows, "SparkRunner")

    cluster.start()  # Brings worker-1 back (a fresh pool beside it) for the predict job.
    export, local_predictions = small_predictions
    apps_before = set(cluster.applications())
    result = scaleout.run_predict_killing_group(os.path.relpath(export, folder), out.name, "pred_spark_cluster",
                                                *cluster.job_flags(), cwd=folder, timeout=TIMEOUT)
    assert result.returncode == 0, cluster.explain(result)
    outputs.assert_same_predictions(local_predictions, folder / "pred_spark_cluster", same_input_dir=False)
    [application] = [app for app_id, app in cluster.applications().items() if app_id not in apps_before]
    assert application["state"] == "FINISHED", application
