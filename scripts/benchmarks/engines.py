"""*_vs_local: the job's marginal images/s on each engine of docs/runners.md against the local runner's, same run.

Issue 53 (item 3). Each engine runs its documented command (docs/runners.md, "The engines side by side") on the
light set's rows, N and FACTOR x N of them, so that start-up (JVMs, job servers, SDK workers importing TensorFlow)
cancels and the marginal rate is images/s of steady work. Repetitions go engine after engine, local first, so
every engine's sample sits beside a local one of the same minutes; each ratio is the engine's rate over that
local rate. Every run must write all its rows (checked from its manifest), or the section fails. Every run
starts its Python SDK workers, as a fresh process does: before a standing cluster's run the section waits
until its pools run none (a Flink TaskManager keeps one for a minute after a job; had the larger run found
the smaller run's warm, its marginal rate would have been 1,130 images/s on these 2 cores), and each cluster
runs one job before the first repetition, uncounted (a fresh JVM's first job also loads classes and compiles).

What runs beside the jobs for the whole section, started before the first and stopped after the last by the
project's own scripts and recorded PIDs, all on the loopback: Beam's job service and a worker pool (the portable
runner), `scripts/flink_cluster.sh` (a JobManager, 2 TaskManagers of 1 slot, a worker pool each) and
`scripts/spark_cluster.sh` (a master, 2 workers of 1 core, a worker pool each). Idle, they take a few percent of
one core (heartbeats), on every engine's runs alike. Needs Java 17 and Maven (the jars, once, as the tests do).
Dataflow is not measured: it cannot be reached from here.
"""

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time

from benchmarks.data import write_csv
from benchmarks.harness import (
    REPO,
    free_port,
    in_turn,
    marginal_rate,
    process_tree,
    python_command,
    run_measured,
    wait_listening,
)
from tf_serving_input.layout import OutputLayout  # No TensorFlow import.

FACTOR = 10  # Start-up on a cluster is ~30-80 s a run: the larger run needs many images past it.
# Name -> the ratio against local; the order runs and reports them.
ENGINES = {
    "local": None,
    "portable": "portable_vs_local",
    "flink_embedded": "flink_embedded_vs_local",
    "flink_cluster": "flink_cluster_vs_local",
    "spark_cluster": "spark_cluster_vs_local",
}
TITLES = {
    "local": "local runner (default: a worker process per core)",
    "portable": "portable runner, a separate worker pool",
    "flink_embedded": "Flink embedded (scripts/run_flink.sh's default, LOOPBACK)",
    "flink_cluster": "Flink standing cluster (2 TaskManagers, a pool each)",
    "spark_cluster": "Spark standing cluster (2 workers, a pool each)",
}
START_TIMEOUT = 300


@contextlib.contextmanager
def portable_services(folder):
    """Beam's job service and a worker pool, as docs/runners.md starts them; yields (job port, pool port)."""
    os.makedirs(folder, exist_ok=True)
    # The pool starts each worker with the `python` on PATH: this one's.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    job_port, pool_port = free_port(), free_port()
    processes = []
    try:
        for name, module, flag, port in (
                ("job_service", "apache_beam.runners.portability.local_job_service_main", "--port", job_port),
                ("worker_pool", "apache_beam.runners.worker.worker_pool_main", "--service_port", pool_port)):
            log_path = os.path.join(folder, f"{name}.log")
            with open(log_path, "w") as log:
                process = subprocess.Popen([sys.executable, "-m", module, f"{flag}={port}"], stdout=log,
                                           stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True)
            processes.append(process)
            wait_listening(port, process, log_path)
        yield job_port, pool_port
    finally:
        for process in reversed(processes):  # Each in its own group: the pool's workers end with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@contextlib.contextmanager
def standing_cluster(script, folder_variable, folder):
    """`scripts/SCRIPT start` with its folder in `folder_variable`; yields its KEY=VALUE lines (the last line
    under 'URL'); `stop` at the end, also after a failed start (it stops what its PID files name)."""
    env = dict(os.environ, **{folder_variable: folder})
    command = ["bash", os.path.join(REPO, "scripts", script)]
    try:
        started = subprocess.run([*command, "start"], env=env, cwd=REPO, capture_output=True, text=True,
                                 timeout=START_TIMEOUT)
        if started.returncode != 0:
            raise RuntimeError(f"{script} start failed:\n{started.stderr[-3000:]}")
        lines = started.stdout.strip().splitlines()
        values = dict(line.split("=", 1) for line in lines if "=" in line)
        values["URL"] = lines[-1]
        yield values
    finally:
        subprocess.run([*command, "stop"], env=env, cwd=REPO, capture_output=True, timeout=START_TIMEOUT)


def pool_pids(cluster_folder):
    """The PIDs of a standing cluster's Beam worker pools, from its PID files ("PID START_TIME")."""
    pids = []
    for path in glob.glob(os.path.join(glob.escape(cluster_folder), "pids", "worker-pool-*.pid")):
        with open(path) as f:
            pids.append(int(f.read().split()[0]))
    return pids


def running_children(pid):
    """The descendants of `pid` that have not exited. Not its zombies: Beam's pool waits for a worker only when
    the runner stops it, and a Spark executor ends without doing so (its worker exits, unreaped)."""
    running = []
    for child in process_tree(pid)[1:]:
        try:
            with open(f"/proc/{child}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    running.append(child)
        except (OSError, IndexError):
            continue
    return running


def wait_for_idle_pools(cluster_folder, timeout=180):
    """Waits until the cluster's pools run no SDK worker. A Flink TaskManager keeps its worker for
    --environment_cache_millis (60 s) after a job: the next job would find it warm, TensorFlow imported,
    where every other engine's run starts its workers. Each measured run starts cold, as theirs do."""
    deadline = time.monotonic() + timeout
    while any(running_children(pid) for pid in pool_pids(cluster_folder)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker pools of {cluster_folder} still run SDK workers after {timeout} s")
        time.sleep(1)


@contextlib.contextmanager
def engines_up(folder):
    """Starts every engine's services; yields {engine: the command before --input_csv's} and {engine: its
    standing cluster's folder}; stops them all."""
    job = python_command("-m", "beam_pipeline")
    run_flink = ["bash", os.path.join(REPO, "scripts", "run_flink.sh")]
    with contextlib.ExitStack() as stack:
        job_port, pool_port = stack.enter_context(portable_services(os.path.join(folder, "portable")))
        clusters = {"flink_cluster": os.path.join(folder, "flink-cluster"),
                    "spark_cluster": os.path.join(folder, "spark-cluster")}
        flink = stack.enter_context(
            standing_cluster("flink_cluster.sh", "FLINK_CLUSTER_DIR", clusters["flink_cluster"]))
        spark = stack.enter_context(
            standing_cluster("spark_cluster.sh", "SPARK_CLUSTER_DIR", clusters["spark_cluster"]))
        yield {
            "local": job,
            "portable": [*job, "--runner=PortableRunner", f"--job_endpoint=localhost:{job_port}",
                         "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool_port}"],
            "flink_embedded": run_flink,
            "flink_cluster": [*run_flink, f"--flink_master={flink['FLINK_REST']}", "--parallelism=2",
                              "--environment_type=EXTERNAL",
                              f"--environment_config={flink['FLINK_ENVIRONMENT_CONFIG']}"],
            "spark_cluster": [*job, "--runner=SparkRunner", f"--spark_master_url={spark['URL']}",
                              "--environment_type=EXTERNAL",
                              f"--environment_config={spark['SPARK_ENVIRONMENT_CONFIG']}"],
        }, clusters


@contextlib.contextmanager
def ended_by_sigterm():
    """SIGTERM (a `kill`, a CI timeout) ends the section as Ctrl-C does: the clusters are stopped on the way out."""
    def raise_exit(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_wall(command, csv_path, out, rows):
    """Seconds of one run of `command` on `csv_path`; RuntimeError unless its manifest says all `rows` written."""
    wall, _ = run_measured([*command, "--input_csv", csv_path, "--output_dir", out, "--overwrite", "--no_progress"])
    manifest = OutputLayout(out).load_manifest()
    if (manifest["rows"], manifest["written"]) != (rows, rows):
        raise RuntimeError(f"{out}: {manifest['written']} of {manifest['rows']} rows written, expected {rows}")
    return wall


def measure(bench, image_set):
    """Every engine's marginal images/s on `image_set`'s rows (N, FACTOR x N) and its ratio to local's."""
    results, work = bench.results, os.path.join(bench.work, "engines")
    os.makedirs(work, exist_ok=True)
    rows = len(image_set.images)
    sizes = (rows, FACTOR * rows)
    csvs = {size: write_csv(os.path.join(work, f"engines_{size}.csv"), image_set.images, repeat_to=size)
            for size in sizes}

    with ended_by_sigterm(), engines_up(work) as (commands, clusters):
        def run(engine, size):
            if engine in clusters:
                wait_for_idle_pools(clusters[engine])
            return run_wall(commands[engine], csvs[size], os.path.join(work, f"out_{engine}_{size}"), size)

        for engine in clusters:  # A fresh cluster's first job also pays its JVMs' class loading and JIT.
            results.say(f"   {engine}: warm-up run, {rows} rows {run(engine, rows):.1f} s (not counted)")

        def rate(engine):
            walls = [(size, run(engine, size)) for size in sizes]
            results.say(f"   {engine}: {rows} rows {walls[0][1]:.1f} s, {FACTOR * rows} rows {walls[1][1]:.1f} s")
            return marginal_rate(*walls)

        def log(repetition, sample):
            results.say(f"   [engines {repetition + 1}/{bench.repetitions}] " +
                        ", ".join(f"{engine} {value:.0f} img/s" for engine, value in sample.items()))

        samples = in_turn(bench.repetitions, {engine: (lambda _, e=engine: rate(e)) for engine in ENGINES}, log)
    results.say(f"13. [{image_set.title}] the job on each engine against the local runner (marginal, {rows} vs "
                f"{FACTOR * rows} rows, {os.cpu_count()} cores):")
    for engine, name in ENGINES.items():
        results.rate(f"Beam job on {TITLES[engine]}, marginal ({image_set.name})", samples[engine])
        if name:
            results.ratio(name, image_set.title, [e / local for e, local in zip(samples[engine], samples["local"])])
    return samples
