"""A local Apache Spark standalone cluster, run by `scripts/spark_cluster.sh` (which only finds a python).

The cluster is laid out as a standing one is, from the Spark jars that scripts/spark_job_server.sh
unpacks from pyspark's distribution (CACHE/spark-VERSION/jars; no Spark is installed):
 - 1 master (org.apache.spark.deploy.master.Master);
 - N workers (org.apache.spark.deploy.worker.Worker, 1 core and 1 GiB each), which start each job's
   executors; an executor gets Beam's runner classes from the job (see beam_pipeline/common/spark.py);
 - beside each worker, its own Beam worker pool (scripts/flink/worker_pool.py), which starts the Python
   SDK workers with the .venv's python. Beam names one pool address per job
   (`--environment_config=beam-worker-pool:PORT`) and two executors sharing one pool stop each other's
   workers (both number theirs from 1), so, as on a real cluster where every machine runs its own pool,
   worker i's JVM, and the executors it starts, resolve beam-worker-pool to 127.0.0.(i+1) (a hosts file
   of their own, -Djdk.net.hosts.file in JAVA_TOOL_OPTIONS, which executors inherit), where its pool listens.

  scripts/spark_cluster.sh start [--workers N]  start the cluster and wait until the master lists N
                                                 workers alive; on a cluster that still has its
                                                 master, restart only what is missing (e.g. a killed
                                                 worker), same configuration and ports
  scripts/spark_cluster.sh status               what runs, and the endpoints
  scripts/spark_cluster.sh stop                 end the processes it started, found by their
                                                 recorded PIDs, and delete its scratch files; safe
                                                 to call twice

`start` prints KEY=VALUE lines on stdout (also kept in DIR/cluster.env), progress on stderr, and the
master's URL as its last line:
  SPARK_ENVIRONMENT_CONFIG=beam-worker-pool:P   --environment_type=EXTERNAL --environment_config
  SPARK_WORKER_POOLS=127.0.0.2:P,127.0.0.3:P    the pools, in worker order
  SPARK_MASTER_UI=http://127.0.0.1:PORT         the master's web UI (/json: the workers and apps)
  SPARK_CLUSTER_DIR=DIR
  spark://127.0.0.1:PORT                        --spark_master_url

  SPARK_CLUSTER_DIR      conf, logs, work folders and PID files (default .cache/spark/cluster)
  SPARK_WORKERS          N (default 2; --workers wins)
  SPARK_CLUSTER_TIMEOUT  seconds `start` waits for the cluster (default 180)
  SPARK_HOME             a Spark 3.5 distribution's folder (its jars/; default: the one
                         scripts/spark_job_server.sh unpacked)
Memory: master and workers 256 MB of heap each; each job's executor 1 GiB (Spark's default); the Python
workers on top. Everything listens on the loopback only. Exit codes: 1 the cluster did not come up (its
logs are printed and what was started is stopped), 2 usage or missing prerequisites.

PID files and locking are those of tests/flink_cluster.py (its docstring): "PID START_TIME" in
DIR/pids/NAME.pid, a member counts only while that PID has that start time and the member's command line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import flink_cluster as fc
import scaleout

ROOT = fc.ROOT
JOB_SERVER_SCRIPT = os.path.join(ROOT, "scripts", "spark_job_server.sh")
USAGE = __doc__.split("\n\n")[2]
MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
REGISTERED_LINE = "Successfully registered with master"
DAEMON_HEAP = "256m"
WORKER_CORES, WORKER_MEMORY = "1", "1g"
MAX_WORKERS = fc.MAX_TASK_MANAGERS  # One loopback address per pool.


def properties_file(paths: fc.ClusterPaths) -> str:
    """The daemons' properties file: in every member's command line, so it also says which cluster it is of."""
    return os.path.join(paths.conf, "spark-daemons.conf")


def member_words(paths: fc.ClusterPaths, name: str) -> tuple[str, ...]:
    """Arguments that a member's command line holds: who it is, of which cluster."""
    if name == "master":
        return (MASTER_MAIN, properties_file(paths))
    if name.startswith("worker-pool-"):
        return (fc.WORKER_POOL_SCRIPT,)
    if name.startswith("worker-"):
        return (WORKER_MAIN, properties_file(paths), os.path.join(paths.dir, name, "work"))
    raise ValueError(f"not a member's name: {name!r}")


def cluster_paths(folder: str) -> fc.ClusterPaths:
    """The files of the cluster in `folder` (workers first, then their pools, the master last)."""
    return fc.ClusterPaths(folder, member_words, ("worker-[0-9]*.pid", "worker-pool-*.pid", "master.pid"))


def hosts_file(paths: fc.ClusterPaths, number: int) -> str:
    return os.path.join(paths.conf, f"hosts-worker-{number}")


def find_spark_home(environ: dict[str, str]) -> str:
    """SPARK_HOME, else the distribution beside scripts/spark_job_server.sh's launcher (obtained if missing)."""
    if environ.get("SPARK_HOME"):
        home = os.path.abspath(environ["SPARK_HOME"])
    else:
        # The job server script says on stderr what it does (downloads, the first time) and what fails.
        result = subprocess.run(["bash", JOB_SERVER_SCRIPT], check=False, stdout=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise fc.ClusterError()
        home = spark_home_of(result.stdout.strip())
    if not os.path.isdir(os.path.join(home, "jars")):
        raise fc.ClusterError(f"no jars/ in {home}: set SPARK_HOME to a Spark 3.5 distribution")
    return home


def spark_home_of(launcher: str) -> str:
    """The Spark distribution whose jars the launcher's manifest lists (../spark-VERSION beside it)."""
    import zipfile

    with zipfile.ZipFile(launcher) as jar:
        manifest = jar.read("META-INF/MANIFEST.MF").decode().replace("\r\n ", "")
    for word in manifest.split():
        if "/jars/" in word:
            return os.path.normpath(os.path.join(os.path.dirname(launcher), word.split("/jars/")[0]))
    raise fc.ClusterError(f"{launcher} lists no Spark jars: set SPARK_HOME")


def member_env(spark_home: str, extra_java: str = "") -> dict[str, str]:
    """A daemon's environment: the distribution, loopback binds, the step's JVM options plus `extra_java`."""
    java = " ".join(part for part in (os.environ.get("JAVA_TOOL_OPTIONS", ""), extra_java) if part)
    env = dict(os.environ, SPARK_HOME=spark_home, SPARK_LOCAL_IP="127.0.0.1", SPARK_SCALA_VERSION="2.12")
    if java:
        env["JAVA_TOOL_OPTIONS"] = java
    return env


def daemon_command(paths: fc.ClusterPaths, spark_home: str, main: str, *args: str) -> list[str]:
    return ["java", f"-Xms{DAEMON_HEAP}", f"-Xmx{DAEMON_HEAP}", "-cp", os.path.join(spark_home, "jars", "*"),
            main, "--properties-file", properties_file(paths), *args]


def start_master(paths: fc.ClusterPaths, spark_home: str, port: int, ui_port: int) -> None:
    fc.launch(paths, "master", os.path.join(paths.dir, "master"),
              daemon_command(paths, spark_home, MASTER_MAIN, "--host", "127.0.0.1", "--port", str(port),
                             "--webui-port", str(ui_port)), env=member_env(spark_home))


def start_worker(paths: fc.ClusterPaths, spark_home: str, number: int, master_port: int) -> None:
    """Starts worker `number`, after writing its hosts file (the pool's host name is its own pool's address)."""
    fc._write_atomically(hosts_file(paths, number), fc.hosts_file_text(number))
    name = f"worker-{number}"
    work = os.path.join(paths.dir, name, "work")
    os.makedirs(work, exist_ok=True)
    fc.launch(paths, name, os.path.join(paths.dir, name),
              daemon_command(paths, spark_home, WORKER_MAIN, "--host", "127.0.0.1", "--webui-port", "0",
                             "--cores", WORKER_CORES, "--memory", WORKER_MEMORY, "--work-dir", work,
                             f"spark://127.0.0.1:{master_port}"),
              env=member_env(spark_home, f"-Djdk.net.hosts.file={hosts_file(paths, number)}"))


def alive_workers(ui_port: int, timeout: float = 5) -> int | None:
    """How many workers the master's web UI lists ALIVE; None when it does not answer."""
    try:
        with fc._NO_PROXY_OPENER.open(f"http://127.0.0.1:{ui_port}/json/", timeout=timeout) as response:
            return int(json.load(response)["aliveworkers"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def worker_registered(paths: fc.ClusterPaths, number: int) -> bool:
    try:
        with open(paths.log_file(f"worker-{number}"), encoding="utf-8", errors="replace") as f:
            return REGISTERED_LINE in f.read()
    except OSError:
        return False


def wait_until_up(paths: fc.ClusterPaths, workers: int, ui_port: int, pool_port: int, timeout: float) -> None:
    """Waits until the master lists `workers` workers alive, each registered, each pool listening."""
    deadline = time.monotonic() + timeout
    while True:
        for name in fc.members(paths):
            if fc.running_pid(paths, name) is None:
                raise fc.StartFailed(f"{name} exited during start-up (log: {paths.log_file(name)})")
        count = alive_workers(ui_port)
        up = all(scaleout.accepts_connections(fc.pool_ip(number), pool_port) and worker_registered(paths, number)
                 for number in range(1, workers + 1))
        if (count or 0) >= workers and up:
            return
        if time.monotonic() >= deadline:
            raise fc.StartFailed(f"not up after {timeout}s: the master lists "
                                 f"{'no' if count is None else count} of {workers} workers alive")
        time.sleep(0.5)


def endpoints_text(paths: fc.ClusterPaths, master_port: int, ui_port: int, pool_port: int, workers: int) -> str:
    pools = ",".join(f"{fc.pool_ip(number)}:{pool_port}" for number in range(1, workers + 1))
    return (f"SPARK_ENVIRONMENT_CONFIG={fc.POOL_HOST}:{pool_port}\nSPARK_WORKER_POOLS={pools}\n"
            f"SPARK_MASTER_UI=http://127.0.0.1:{ui_port}\nSPARK_CLUSTER_DIR={paths.dir}\n"
            f"spark://127.0.0.1:{master_port}\n")


def read_ports(paths: fc.ClusterPaths) -> tuple[int, int, int, int] | None:
    """(MASTER, UI, POOL, WORKERS) of the cluster's ports file, or None without a readable one."""
    try:
        with open(paths.ports_file, encoding="utf-8") as f:
            master, ui, pool, workers = (int(field) for field in f.read().split())
        return master, ui, pool, workers
    except (OSError, ValueError):
        return None


def _start_locked(paths: fc.ClusterPaths, spark_home: str, workers: int, timeout: int) -> None:
    ports = read_ports(paths) if fc.running_pid(paths, "master") is not None else None
    repair = ports is not None
    if ports is not None:  # Same configuration and ports as the members still running.
        master_port, ui_port, pool_port, recorded = ports
        if recorded != workers:
            fc.log(f"the cluster runs with {recorded} workers, so {recorded} it stays (stop it to change that)")
        workers = recorded
    else:
        fc.stop_members(paths, quiet=True)  # What is left of a cluster that died.
        ui_port, master_port, pool_port = fc.choose_ports(workers)
        os.makedirs(paths.conf, exist_ok=True)
        os.makedirs(paths.tmp, exist_ok=True)
        fc._write_atomically(properties_file(paths), f"spark.local.dir {paths.tmp}\n")
        fc._write_atomically(paths.ports_file, f"{master_port} {ui_port} {pool_port} {workers}\n")
        for name in os.listdir(paths.logs):
            if name.endswith((".log", ".log.previous")):
                os.remove(os.path.join(paths.logs, name))
        fc.log(f"starting a master and {workers} workers, each with a worker pool, in {paths.dir}")
        start_master(paths, spark_home, master_port, ui_port)
    restarted = False
    for number in range(1, workers + 1):
        worker, pool = f"worker-{number}", f"worker-pool-{number}"
        if fc.running_pid(paths, worker) is None:
            # A worker comes back with a fresh pool, as a restarted machine would.
            if repair:
                fc.log(f"restarting {worker} and {pool}")
                fc.end(paths, [worker, pool])
                restarted = True
            fc.start_worker_pool(paths, number, pool_port)
            start_worker(paths, spark_home, number, master_port)
        elif fc.running_pid(paths, pool) is None:
            fc.log(f"restarting {pool}")
            fc.end(paths, [pool])
            restarted = True
            fc.start_worker_pool(paths, number, pool_port)
    if repair and not restarted:
        fc.log(f"already running ({paths.dir})")
    wait_until_up(paths, workers, ui_port, pool_port, timeout)
    fc._write_atomically(paths.env_file, endpoints_text(paths, master_port, ui_port, pool_port, workers))
    fc.log(f"up: master spark://127.0.0.1:{master_port}, {workers} workers alive (logs: {paths.logs})")


def start(paths: fc.ClusterPaths, workers: int, timeout: int, environ: dict[str, str]) -> int:
    """`start`: brings the cluster up, or back (what of it is missing); prints its endpoints. The exit code."""
    if shutil.which("java") is None:
        raise fc.ClusterError("java is not on PATH (Java 17)")
    if not os.access(fc.VENV_PYTHON, os.X_OK):
        raise fc.ClusterError(f"no {fc.VENV_PYTHON}: run scripts/test.sh or scripts/run_local.sh once")
    spark_home = find_spark_home(environ)  # Before the lock: the first time it downloads for minutes.
    os.makedirs(paths.pids, exist_ok=True)
    os.makedirs(paths.logs, exist_ok=True)
    with fc.cluster_lock(paths):
        previous = {sig: signal.signal(sig, fc._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            _start_locked(paths, spark_home, workers, timeout)
        except fc.PortsUnavailable as error:
            fc.log(f"error: {error}")
            return 1
        except (fc.StartFailed, fc._Interrupted) as error:
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            fc.log(f"error: {str(error) or 'interrupted'}")
            fc.print_logs(paths)
            fc.stop_members(paths)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    with open(paths.env_file, encoding="utf-8") as f:
        sys.stdout.write(f.read())
    sys.stdout.flush()
    return 0


def stop(paths: fc.ClusterPaths) -> int:
    """`stop`: ends every recorded member (a worker's group holds its executors) and deletes the scratch files."""
    if not fc.members(paths):
        fc.log(f"not running ({paths.dir})")
        return 0
    with fc.cluster_lock(paths):
        fc.stop_members(paths)
    return 0


def status(paths: fc.ClusterPaths) -> int:
    """`status`: each member (running or not), how many workers the master lists alive, the endpoints."""
    ports = read_ports(paths)
    return fc.show_status(paths, "workers alive", None if ports is None else lambda: alive_workers(ports[1]))


def parse_args(argv: Sequence[str], environ: dict[str, str]) -> tuple[str, int]:
    """(subcommand, workers) from the command line and SPARK_WORKERS; ClusterError when wrong."""
    command, workers = fc.command_and_count(argv, "--workers", environ.get("SPARK_WORKERS") or "2")
    number = fc._whole_number(workers)
    if not number or number > MAX_WORKERS:
        raise fc.ClusterError(f"the number of workers must be a whole number from 1 to {MAX_WORKERS}")
    fc.check_command(command)
    return command, number


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """The command line (see the module's docstring); returns the exit code."""
    fc.PROGRAM["name"] = "spark_cluster"
    environ = dict(os.environ) if environ is None else environ

    def run(argv: Sequence[str]) -> int:
        command, workers = parse_args(argv, environ)
        paths = cluster_paths(environ.get("SPARK_CLUSTER_DIR") or os.path.join(ROOT, ".cache", "spark", "cluster"))
        if command == "stop":
            return stop(paths)
        if command == "status":
            return status(paths)
        return start(paths, workers, fc._setting(environ, "SPARK_CLUSTER_TIMEOUT", "180"), environ)
    return fc.run_command(run, sys.argv[1:] if argv is None else argv, USAGE)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
