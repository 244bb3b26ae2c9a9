"""The job on a standing Flink session cluster (scripts/flink_cluster.sh) equals the local runner's output.

Runs only where FLINK_JOB_SERVER_JAR names the launcher jar that scripts/flink_job_server.sh
builds (the cluster is started from the Flink jars in its lib/): `scripts/flink_integration_test.sh`
runs this file after tests/scale_out/test_flink.py. Elsewhere it is skipped.

The cluster is laid out as a real one: a JobManager, two TaskManagers whose JVMs hold Flink's
jars and Beam's runner, loaded parent-first (so that each keeps its SDK worker between a job's stages:
flink_cluster.py's KEEPS_SDK_WORKERS), and beside each TaskManager a Beam worker pool of its own that
starts the Python SDK workers. The job is
submitted with `--flink_master=localhost:REST --environment_type=EXTERNAL` and
`--parallelism=2`, so its work is split over both TaskManagers.

One cluster serves the whole session (`flink_cluster`); a further job is one more test function
taking that fixture and `cluster.job_flags()`. Each job here costs minutes (a job server JVM, the
jars shipped, an SDK worker on each TaskManager), so a job carries several checks:
the rerun after the TaskManager kill is also the check that the cluster's output equals the local
runner's, through the small dataset's steps, on both TaskManagers. The predict job on a standing
cluster is Spark's test (test_spark_cluster.py): a predict job here too (~74 s of the step, ~100 s of
CPU, measured 2026-12-05) checked the same portable path (tests/scale_out/test_portable_runner.py
runs it in the unit step) a second time, and went for the CI budget.
"""

import glob
import json
import os
import re
import signal
import time
import urllib.request

import numpy as np
import pytest

import imaging
import in_process
import outputs
import scaleout
from tf_serving_input.layout import OutputLayout

JAR = os.environ.get("FLINK_JOB_SERVER_JAR", "")
JAR = os.path.abspath(JAR) if JAR else ""  # The job runs from another folder.
# A stuck job (e.g. workers that cannot start) fails after this many seconds instead of
# blocking CI; a healthy run takes about two minutes.
TIMEOUT = int(os.environ.get("FLINK_TEST_TIMEOUT", "480"))
SCRIPT = os.path.join(outputs.REPO_ROOT, "scripts", "flink_cluster.sh")
TASK_MANAGERS = ("taskmanager-1", "taskmanager-2")

pytestmark = pytest.mark.skipif(
    not JAR, reason="FLINK_JOB_SERVER_JAR is not set: run scripts/flink_integration_test.sh")


class FlinkCluster(scaleout.ScriptedCluster):
    """A cluster started by scripts/flink_cluster.sh in `folder`: its endpoints, REST API and logs."""

    script = SCRIPT

    def __init__(self, folder, env):
        super().__init__(folder, env)
        self.rest = self.environment_config = None

    def start(self):
        """Starts the cluster, or restarts what of it is missing; fails the test with its logs."""
        result = self._script("start")
        assert result.returncode == 0, f"flink_cluster.sh start failed:\n{result.stderr[-12000:]}"
        endpoints = dict(line.split("=", 1) for line in result.stdout.split())
        self.rest = endpoints["FLINK_REST"]
        self.environment_config = endpoints["FLINK_ENVIRONMENT_CONFIG"]

    def job_flags(self):
        """The Beam flags that run a job on this cluster, its work split over both TaskManagers."""
        return ("--runner=FlinkRunner", f"--flink_master={self.rest}", f"--flink_job_server_jar={JAR}",
                "--environment_type=EXTERNAL", f"--environment_config={self.environment_config}",
                f"--parallelism={len(TASK_MANAGERS)}", scaleout.FLINK_ENVIRONMENT_CACHE)

    def get(self, path):
        with urllib.request.urlopen(f"http://{self.rest}{path}", timeout=30) as response:
            return json.load(response)

    def jobs(self):
        """{job id: overview} of every job the cluster has run."""
        return {job["jid"]: job for job in self.get("/jobs/overview")["jobs"]}

    def subtask_rows_by_task_manager(self, job_id, step):
        """{TaskManager id: records read} by the subtasks of the job's vertex that runs `step`."""
        [vertex] = [v for v in self.get(f"/jobs/{job_id}")["vertices"] if step in v["name"]]
        rows = {}
        for subtask in self.get(f"/jobs/{job_id}/vertices/{vertex['id']}")["subtasks"]:
            manager = subtask["taskmanager-id"]
            rows[manager] = rows.get(manager, 0) + subtask["metrics"]["read-records"]
        return rows

    def workers_started(self):
        """How many SDK workers each TaskManager's pool has started (since the pool started)."""
        counts = []
        for number in range(1, len(TASK_MANAGERS) + 1):
            with open(os.path.join(self.folder, "logs", f"worker-pool-{number}.log"), errors="replace") as f:
                counts.append(f.read().count("Starting worker with command"))
        return counts

    def live_workers(self):
        """The pids of the SDK workers that the pools are running now (each pool's child processes)."""
        pools = {self.pid(f"worker-pool-{number}") for number in range(1, len(TASK_MANAGERS) + 1)}
        workers = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, parent = f.read().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue  # Gone meanwhile.
            if int(parent) in pools and state != "Z":
                workers.append(int(entry))
        return workers

    def log_files(self):
        return sorted(glob.glob(os.path.join(self.folder, "logs", "*.log*")))


@pytest.fixture(scope="session")
def flink_cluster(tmp_path_factory):
    """A Flink session cluster of two TaskManagers, each with its own worker pool, stopped afterwards."""
    if not os.path.isdir(os.path.join(os.path.dirname(JAR), "lib")):
        why = f"{JAR} is not the launcher of scripts/flink_job_server.sh (no lib/ of Flink jars)"
        if os.environ.get("FLINK_TEST_CLUSTER_DIR"):  # Inside the Flink step: its fault test must run.
            pytest.fail(f"{why}: the standing-cluster suite cannot run, and the Flink step must not pass without it")
        pytest.skip(why)
    # scripts/flink_integration_test.sh names the folder, so that it can stop the cluster by the
    # PIDs recorded there even if this process is killed.
    folder = os.environ.get("FLINK_TEST_CLUSTER_DIR") or str(tmp_path_factory.mktemp("flink_cluster"))
    cluster = FlinkCluster(folder, dict(os.environ, FLINK_CLUSTER_DIR=folder,
                                        FLINK_TASK_MANAGERS=str(len(TASK_MANAGERS)), FLINK_TASK_SLOTS="1",
                                        FLINK_LIB=os.path.join(os.path.dirname(JAR), "lib")))
    try:
        cluster.start()
        yield cluster
    finally:
        stopped = cluster.stop()  # By the PIDs it recorded; also after a failed start.
        assert stopped.returncode == 0, stopped.stderr


ABSENT = "absent.jpg"


def make_slow_dataset(folder, rows=32, distinct=2):
    """`rows` rows over two 12-megapixel JPEGs, each row a full decode (0.1-0.4 s): a shard-writing step of
    24 shards whose TaskManager still has most of its 12 shards (~16 decodes) to write when the first shard
    anywhere is done and the kill lands. More rows or photos only made each of the test's three runs (and
    the photos' making, 1.5 s of CPU each) dearer: 64 rows over 6 photos before. Plus one missing file, and
    the small dataset's step file. Returns (the CSV's path, its rows)."""
    rng = np.random.default_rng(3)
    for i in range(distinct):
        (folder / f"photo {i}.jpg").write_bytes(imaging.encode(imaging.photo_like(rng, 3000, 4000), "JPEG",
                                                               quality=90))
    table = [[f"photo {i % distinct}.jpg", "xyz"[i % 3], "validation" if i % 6 == 0 else "train"]
             for i in range(rows)]
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], table + [[ABSENT, "x", "train"]])
    (folder / "small_steps.py").write_text(scaleout.SMALL_PYTHON_STEP)  # The small dataset's steps, as its runs.
    return folder / "in.csv", len(table) + 1


def test_killed_task_manager_fails_the_job_and_a_rerun_resumes(tmp_path, flink_cluster, request):
    """SIGKILL one TaskManager while shards are being written; the rerun is the standing cluster's job.

    What happens (Flink's default without checkpointing is no restart strategy, and the cluster
    sets none): the job fails, naming the lost TaskManager; nothing under a final name is
    partial; once the TaskManager is back, the same command resumes and the output equals an
    uninterrupted local run's. The resumed job also carries the checks of a job on the cluster
    (one job, not a separate uninterrupted one: each job here costs minutes of JVM and worker
    start-up): through the small dataset's steps, the REST API lists it FINISHED with more than
    one task, both TaskManagers ran shard-writing subtasks that got rows, and each with SDK
    workers from its own pool.
    """
    cluster = flink_cluster
    csv_path, rows = make_slow_dataset(tmp_path)
    flags = ("--image_size", "32", "--num_shards", "12", "--no-jpeg_shrink_on_load",  # 24 shards
             *scaleout.small_step_flags(tmp_path))
    uninterrupted = tmp_path / "out_local"
    out = tmp_path / "out_flink"
    job = (os.path.relpath(csv_path, tmp_path), out.name, *flags, *cluster.job_flags())  # the command's arguments
    jobs_before = set(cluster.jobs())

    process = scaleout.start_job(*job, cwd=tmp_path)
    status_dir = out / OutputLayout.STATUS_DIR
    deadline = time.monotonic() + TIMEOUT
    while process.poll() is None and time.monotonic() < deadline and not list(status_dir.glob("*.json")):
        time.sleep(0.02)
    killed = process.poll() is None and bool(list(status_dir.glob("*.json")))
    if killed:
        os.kill(cluster.pid("taskmanager-1"), signal.SIGKILL)  # The JVM only, as an OOM kill would.
        # The uninterrupted reference (the local runner, in memory: its worker processes would import TensorFlow
        # once more each, and its output is the same bytes whatever the workers, test_reliability.py) runs while
        # Flink notices the loss and the TaskManager restarts, which leave the CPUs mostly idle; it is awaited
        # before the comparisons.
        reference = scaleout.start_job(csv_path, uninterrupted, *flags, *in_process.IN_MEMORY,
                                       cwd=tmp_path)  # The steps' paths are relative.
        # A failed assertion before it is awaited must not leave it running: its group goes with the test.
        request.addfinalizer(lambda: reference.poll() is None and scaleout.signal_group(reference.pid, signal.SIGKILL))
    result = scaleout.finish_job(process, timeout=TIMEOUT if killed else 1)
    assert killed, "the job ended before writing any shard\n" + cluster.explain(result)

    # Flink did not recover the job: it failed, and the launcher says why in one line, the
    # details (which TaskManager) in its log.
    assert result.returncode == 1, cluster.explain(result)
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: a worker machine was lost (a Flink TaskManager stopped"), line
    log = line.rsplit("(traceback: ", 1)[1].rstrip(")")
    assert re.search(r"TaskManager with id taskmanager-1 is no longer reachable|remote task manager",
                     open(log).read()), cluster.explain(result)
    [failed] = [overview for jid, overview in cluster.jobs().items() if jid not in jobs_before]
    assert failed["state"] == "FAILED", failed

    # Brings taskmanager-1 back with a fresh pool beside it: the old pool's workers, which
    # served the dead TaskManager, are ended. The other TaskManager keeps its SDK worker for the job's
    # --environment_cache_millis after the job failed, finishing the bundle it had: the count is taken once
    # the pools run no worker, so that nothing writes into `out` any more.
    cluster.start()
    deadline = time.monotonic() + TIMEOUT
    while cluster.live_workers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.live_workers(), "the failed job's SDK workers outlived its environment cache"
    finished = len(list(status_dir.glob("*.json")))
    reference_result = scaleout.finish_job(reference, timeout=600)
    assert reference_result.returncode == 0, reference_result.stderr[-3000:]
    total_shards = len(outputs.shard_bytes(uninterrupted))
    assert 0 < finished < total_shards, f"not killed part-way: {finished} of {total_shards} shards finished"
    assert not (out / OutputLayout.MANIFEST_FILE).exists()
    outputs.assert_every_shard_reads_to_its_end(out)  # Nothing under a final name is partial.

    jobs_before, workers_before = set(cluster.jobs()), cluster.workers_started()
    resumed = scaleout.run_job_killing_group(*job, cwd=tmp_path, timeout=TIMEOUT)
    assert resumed.returncode == 0, cluster.explain(resumed)
    assert f"Resuming: {finished} shard(s)" in resumed.stderr, resumed.stderr[-3000:]
    assert not list(out.rglob("*.incomplete"))
    # The same shards (bytes, keys), statistics and errors as the local run, through the same steps.
    written = outputs.manifest(out)
    assert written["runner"] == "FlinkRunner"
    assert [step["kind"] for step in written["config"]["image_steps"]] == ["python", "tf"]
    assert (written["rows"], written["written"], written["failed"]) == (rows, rows - 1, 1)
    assert [e["source"] for e in outputs.errors(out)] == [ABSENT]
    outputs.assert_same_output(uninterrupted, out)

    [(job_id, overview)] = [(jid, j) for jid, j in cluster.jobs().items() if jid not in jobs_before]
    assert overview["state"] == "FINISHED" and overview["tasks"]["total"] > 1, overview
    # Both TaskManagers ran a subtask of the shard-writing step that got shards (kept ones are read too) ...
    writers = cluster.subtask_rows_by_task_manager(job_id, "WriteShards")
    assert sorted(manager for manager, count in writers.items() if count > 0) == list(TASK_MANAGERS), writers
    # ... with SDK workers from its own pool (a TaskManager reaches only the pool beside it).
    started = [after - before for before, after in zip(workers_before, cluster.workers_started())]
    assert all(count > 0 for count in started), started
