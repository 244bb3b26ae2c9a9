"""A local Apache Flink 1.19 session cluster, run by `scripts/flink_cluster.sh` (which only finds a python).

The cluster is laid out as a standing cluster is, from the jars that scripts/flink_job_server.sh
resolves (no Flink distribution is downloaded):
 - 1 JobManager (StandaloneSessionClusterEntrypoint; classpath: the launcher's lib/*);
 - N TaskManagers (TaskManagerRunner; classpath: the same lib/*, Flink's jars and Beam's runner, loaded
   parent-first: see KEEPS_SDK_WORKERS);
 - beside each TaskManager, its own Beam worker pool (scripts/flink/worker_pool.py: Beam's
   worker_pool_main servicer, bound to one address), which starts the Python SDK workers with
   the .venv's python.

  scripts/flink_cluster.sh start [--task_managers N]  start the cluster and wait until the REST
                                                       API lists N TaskManagers; on a cluster
                                                       that still has its JobManager, restart
                                                       only what is missing (e.g. a killed
                                                       TaskManager), same configuration and ports
  scripts/flink_cluster.sh status                     what runs, and the endpoints
  scripts/flink_cluster.sh stop                       end the processes it started, found by
                                                       their recorded PIDs, and delete its
                                                       scratch files; safe to call twice

`start` prints KEY=VALUE lines on stdout (also kept in DIR/cluster.env), progress on stderr:
  FLINK_REST=localhost:PORT                     the JobManager's REST API: --flink_master
  FLINK_ENVIRONMENT_CONFIG=beam-worker-pool:P   --environment_type=EXTERNAL --environment_config
  FLINK_WORKER_POOLS=127.0.0.2:P,127.0.0.3:P    the pools, in TaskManager order
  FLINK_CLUSTER_DIR=DIR
One pool per TaskManager, as on a real cluster where every machine runs a pool at the same
address (e.g. localhost:50000): here TaskManager i resolves the host name beam-worker-pool to
127.0.0.(i+1) (its JVM's own hosts file, -Djdk.net.hosts.file), where its pool listens. Beam
names a single pool address per job, and TaskManagers sharing one pool stop each other's
workers (see scripts/flink/worker_pool.py). Linux: all of 127.0.0.0/8 is the loopback.

  FLINK_CLUSTER_DIR      conf, logs and PID files (default .cache/flink/cluster)
  FLINK_TASK_MANAGERS    N (default 2; --task_managers wins)
  FLINK_TASK_SLOTS       slots per TaskManager (default 1: a job of parallelism N uses all N)
  FLINK_CLUSTER_TIMEOUT  seconds `start` waits for the cluster (default 180)
  FLINK_LIB              a folder of Flink 1.19 + Beam runner jars (default: the launcher's lib/)
Memory, sized for a 2-core machine that runs tests beside the cluster: JobManager heap 512 MB;
each TaskManager heap 256 MB + direct 256 MB (+ metaspace); the Python workers on top.
Everything listens on the loopback only. Exit codes: 1 the cluster did not come up (its logs
are printed and what was started is stopped), 2 usage or missing prerequisites.

PID files (DIR/pids/NAME.pid) hold "PID START_TIME" (field 22 of /proc/PID/stat). A recorded
process counts as the member only while that PID still has that start time and its command line
(/proc/PID/cmdline) is the member's; anything else is a stale file, removed without signalling
the process that now has the PID. `start` and `stop` take a lock (DIR/lock) for their whole
run, so two of them at once run one after the other: a second `start` finds the cluster up.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence

# Run as a script (scripts/flink_cluster.sh), this file's folder is on sys.path, so the tests'
# helpers import; scaleout imports only the standard library at its top.
import scaleout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The venv's path as written, not resolved: its bin/ goes first on the pools' PATH, and a .venv
# that is a symbolic link must stay the interpreter the SDK workers run with.
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
WORKER_POOL_SCRIPT = os.path.join(ROOT, "scripts", "flink", "worker_pool.py")
JOB_SERVER_SCRIPT = os.path.join(ROOT, "scripts", "flink_job_server.sh")
USAGE = __doc__.split("\n\n")[2]  # The subcommands paragraph of the docstring above.

POOL_HOST = "beam-worker-pool"
MAX_TASK_MANAGERS = 250  # 127.0.0.2 .. 127.0.0.251: one loopback address per pool.
JOB_MANAGER_MAIN = "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint"
TASK_MANAGER_MAIN = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
# A TaskManager's log line once the JobManager has accepted it. The REST API may still list a
# TaskManager that was killed a moment ago, so a restarted one counts only with this line.
REGISTERED_LINE = "Successful registration at resource manager"
STOP_GRACE_S = 10  # After SIGTERM to every member, what is left is sent SIGKILL.

# Why the TaskManagers hold Beam's runner jars too, loaded parent-first: Beam's Flink runner keeps a job's
# Python SDK worker between its stages (`--environment_cache_millis`) only when its own classes come from
# Flink's parent classloader (FlinkExecutableStageContextFactory: "Clean up context immediately if its class is
# not loaded on Flink parent classloader"). With Flink's jars alone there (Beam's shipped with each job, loaded
# child-first), every stage on every TaskManager started a fresh worker, each importing TensorFlow (~11 s of
# CPU): the fault test started ~7 a TaskManager for a job and took 420 s of CPU; with this, 1-2 a pool, 274 s.
# Parent-first for every class, not only org.apache.beam.: Beam's objects deserialized in a task reference its
# dependencies (joda-time, jackson), which must come from the same loader as Beam's own classes.
KEEPS_SDK_WORKERS = "classloader.resolve-order: parent-first\n"
# What Flink's start scripts give every JVM on Java 17 (the distribution's env.java.opts.all):
# Flink reflects into these JDK packages.
JAVA_MODULE_OPTS = (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED", "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED",
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED", "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED",
)
JOB_MANAGER_HEAP = "512m"
# Without Flink's start scripts a TaskManager must be given every memory pool (in MB here), and
# its JVM's limits must match them: `task_manager_jvm_flags` derives those from this one table.
# Framework off-heap holds a batch job's 64 MB shuffle read buffer (Flink's default 128m; less
# fails the job with an OOM).
TASK_MANAGER_MEMORY_MB = {
    "taskmanager.memory.framework.heap.size": 64,
    "taskmanager.memory.task.heap.size": 192,
    "taskmanager.memory.framework.off-heap.size": 128,
    "taskmanager.memory.task.off-heap.size": 0,
    "taskmanager.memory.managed.size": 64,
    "taskmanager.memory.network.min": 128,
    "taskmanager.memory.network.max": 128,
    "taskmanager.memory.jvm-metaspace.size": 256,
    "taskmanager.memory.jvm-overhead.min": 64,
    "taskmanager.memory.jvm-overhead.max": 64,
}


class ClusterError(Exception):
    """A refusal, exit code 2: a missing prerequisite or a wrong setting. Its message may be empty
    when a tool this module ran has already said what is wrong."""


class UsageError(ClusterError):
    """A command line this module does not take: the usage is printed."""


class StartFailed(Exception):
    """The cluster did not come up (exit code 1): what was started is stopped, its logs printed."""


class _Interrupted(Exception):
    """SIGINT or SIGTERM arrived while `start` was launching or waiting."""


# `start`'s handling of SIGINT and SIGTERM: raise _Interrupted, or, while a member is being
# launched and recorded, once that is done.
_signals = {"deferring": False, "pending": False}


def _on_signal(signum: int, frame: object) -> None:
    """The SIGINT and SIGTERM handler of `start`: it unwinds into stopping what was started."""
    if _signals["deferring"]:
        _signals["pending"] = True
    else:
        raise _Interrupted()


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Holds back `_on_signal`'s _Interrupted until the block is done (raised then, if one came)."""
    _signals["deferring"] = True
    try:
        yield
    finally:
        _signals["deferring"] = False
    if _signals["pending"]:
        _signals["pending"] = False
        raise _Interrupted()


# The name progress lines start with: tests/spark_cluster.py, which runs this module's process handling, sets its own.
PROGRAM = {"name": "flink_cluster"}


def log(message: str) -> None:
    """A progress line on stderr (stdout carries only what `start` and `status` print for scripts)."""
    print(f"{PROGRAM['name']}: {message}", file=sys.stderr, flush=True)


# --- where everything lives ----------------------------------------------------------------------
class ClusterPaths:
    """The files of one cluster, all under its folder `dir` (FLINK_CLUSTER_DIR, made absolute:
    every member runs in a folder of its own)."""

    __slots__ = ("conf", "dir", "env_file", "lock_file", "logs", "member_patterns", "member_words", "pids",
                 "ports_file", "tmp")

    def __init__(self, folder: str, member_words: Callable[[ClusterPaths, str], tuple[str, ...]] | None = None,
                 member_patterns: tuple[str, ...] = ("taskmanager-*.pid", "worker-pool-*.pid", "jobmanager.pid")):
        # Another cluster of this layout (tests/spark_cluster.py) names its members' PID files and the words of
        # their command lines; by default they are Flink's (`member_command_words`).
        self.member_words, self.member_patterns = member_words, member_patterns
        self.dir = os.path.abspath(folder)
        self.conf = os.path.join(self.dir, "conf")  # flink-conf.yaml, the TaskManagers' hosts files
        self.pids = os.path.join(self.dir, "pids")  # NAME.pid: "PID START_TIME"
        self.logs = os.path.join(self.dir, "logs")  # NAME.log (and NAME.log.previous once restarted)
        self.tmp = os.path.join(self.dir, "tmp")  # Flink's scratch: the blob store keeps each job's jars (~150 MB)
        self.env_file = os.path.join(self.dir, "cluster.env")  # the KEY=VALUE endpoints `start` printed
        self.ports_file = os.path.join(self.dir, "ports")  # "REST POOL TASK_MANAGERS", reused by a repair
        self.lock_file = os.path.join(self.dir, "lock")  # held by `start` and `stop` while they run

    def pid_file(self, name: str) -> str:
        """The PID file of member `name`."""
        return os.path.join(self.pids, f"{name}.pid")

    def log_file(self, name: str) -> str:
        """The log of member `name`."""
        return os.path.join(self.logs, f"{name}.log")

    def hosts_file(self, number: int) -> str:
        """TaskManager `number`'s own hosts file (its JVM's name resolution)."""
        return os.path.join(self.conf, f"hosts-taskmanager-{number}")


def pool_ip(number: int) -> str:
    """The loopback address of TaskManager `number`'s pool (1 -> 127.0.0.2)."""
    return f"127.0.0.{number + 1}"


# --- processes: each in a session (process group) of its own, recorded as "PID START_TIME" -------
def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of process `pid` from /proc/PID/stat, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            # The command name (field 2) is in parentheses and may hold spaces or ')'.
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]  # fields 3 and 22
    except (OSError, IndexError):
        return None


def process_start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), or None once it has ended (zombie included).

    With the PID it names one process: a later process that reuses the PID has another start time.
    """
    stat = _stat(pid)
    return stat[1] if stat and stat[0] != "Z" else None


def process_gone(pid: int) -> bool:
    """Whether no live process has `pid`: none at all, or only a zombie (which no one can reuse yet)."""
    stat = _stat(pid)
    return stat is None or stat[0] == "Z"


def process_command_line(pid: int) -> list[str] | None:
    """The argv of process `pid` (/proc/PID/cmdline), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode("utf-8", "replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return None


def member_command_words(paths: ClusterPaths, name: str) -> tuple[str, ...]:
    """Arguments that a member's command line holds (whole arguments): who it is, of which cluster."""
    if paths.member_words is not None:
        return paths.member_words(paths, name)
    if name == "jobmanager":
        return (JOB_MANAGER_MAIN, paths.conf)
    if name.startswith("taskmanager-"):
        return (TASK_MANAGER_MAIN, paths.conf, f"-Dtaskmanager.resource-id={name}")
    if name.startswith("worker-pool-"):
        return (WORKER_POOL_SCRIPT,)
    raise ValueError(f"not a member's name: {name!r}")


def is_member_command(paths: ClusterPaths, name: str, argv: Sequence[str]) -> bool:
    """Whether `argv` is the command line of member `name` of this cluster.

    Paths compare by their real path, so a folder named through a symbolic link, or with a
    trailing slash by an earlier version of this script, is still the same folder.
    """
    real = {os.path.realpath(arg) for arg in argv if arg.startswith("/")}
    return all(word in argv or (word.startswith("/") and os.path.realpath(word) in real)
               for word in member_command_words(paths, name))


def read_pid_file(path: str) -> tuple[int, str] | None:
    """(PID, start time) of a PID file; None where there is none or it is unreadable (start time may be '')."""
    try:
        with open(path, encoding="utf-8") as f:
            fields = f.read().split()
        return int(fields[0]), (fields[1] if len(fields) > 1 else "")
    except (OSError, ValueError, IndexError):
        return None


def is_recorded_process(paths: ClusterPaths, name: str, pid: int, started: str) -> bool:
    """Whether `pid` is still the very process recorded for member `name` (same start, its command line).

    A live JVM's /proc/PID/cmdline now and then reads empty (seen here while it starts, and once
    in a while later): an empty read is retried, and if it stays empty the start time decides (a
    process with that PID and that start time is the one recorded). A command line that reads,
    and is another program's, is never the member's.
    """
    if not started or process_start_time(pid) != started:
        return False
    for _ in range(5):
        argv = process_command_line(pid)
        if argv:
            return is_member_command(paths, name, argv)
        time.sleep(0.02)
    return process_start_time(pid) == started


def running_pid(paths: ClusterPaths, name: str) -> int | None:
    """Member `name`'s recorded PID if that very process still runs, else None (no file, or a stale one)."""
    record = read_pid_file(paths.pid_file(name))
    if record and is_recorded_process(paths, name, *record):
        return record[0]
    return None


def _write_atomically(path: str, text: str) -> None:
    """Writes `text` to `path` under a temporary name first, so that a reader never sees half of it."""
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)


def launch(paths: ClusterPaths, name: str, cwd: str, command: Sequence[str],
           env: dict[str, str] | None = None) -> subprocess.Popen:
    """Starts member `name` (`command` in `cwd`, in a session of its own) and records its PID file.

    Output goes to LOGS/NAME.log; a restarted member's earlier log is kept, once, as NAME.log.previous.
    """
    os.makedirs(cwd, exist_ok=True)
    log_path = paths.log_file(name)
    if os.path.exists(log_path):
        os.replace(log_path, log_path + ".previous")
    with _signals_deferred():  # A member started but not recorded is one that no `stop` finds.
        try:
            process = scaleout.spawn_in_session(list(command), log_path, env=env, cwd=cwd)
        except OSError as error:
            raise StartFailed(f"{name} could not be started: {error}") from error
        # Popen returns once the command has been exec'd, so its start time is there to read;
        # one that has already died records no start time and so never counts as running.
        _write_atomically(paths.pid_file(name), f"{process.pid} {process_start_time(process.pid) or ''}\n")
    return process


def end(paths: ClusterPaths, names: Iterable[str], quiet: bool = False) -> None:
    """Ends these members' process groups (each process and what it started, e.g. a pool's SDK workers).

    SIGTERM to all at once, SIGKILL to what is left after STOP_GRACE_S. A recorded PID that a
    later, unrelated process has taken is left alone. A member that has ended may have left its
    group behind (a killed pool's workers): while any of the group lives, no new process can get
    the group's ID, so signalling the group of a PID no live process has reaches only our leftovers.
    """
    stopping = []
    for name in names:
        record = read_pid_file(paths.pid_file(name))
        if record:
            pid, started = record
            if is_recorded_process(paths, name, pid, started):
                scaleout.signal_group(pid, signal.SIGTERM)
                stopping.append((name, pid, started))
            elif process_gone(pid):
                scaleout.signal_group(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            os.remove(paths.pid_file(name))
    deadline = time.monotonic() + STOP_GRACE_S
    for name, pid, started in stopping:
        while process_start_time(pid) == started and time.monotonic() < deadline:
            time.sleep(0.1)
        # Still running, or ended with part of its group perhaps still alive: KILL the group. A
        # PID that another process took in between (a new start time) is left alone.
        if process_start_time(pid) == started or process_gone(pid):
            scaleout.signal_group(pid, signal.SIGKILL)
        if not quiet:
            log(f"stopped {name} (pid {pid})")


def _member_number(path: str) -> int:
    """N of a NAME-N.pid file, for listing members in numeric order (taskmanager-2 before -10)."""
    match = re.search(r"-(\d+)\.pid$", path)
    return int(match.group(1)) if match else 0


def members(paths: ClusterPaths) -> list[str]:
    """Every member with a PID file, in the order of `paths.member_patterns` (Flink's: TaskManagers first,
    then their pools, the JobManager last)."""
    names = []
    for pattern in paths.member_patterns:
        for path in sorted(glob.glob(os.path.join(glob.escape(paths.pids), pattern)), key=_member_number):
            if os.path.isfile(path):
                names.append(os.path.basename(path)[:-len(".pid")])
    return names


def stop_members(paths: ClusterPaths, quiet: bool = False) -> None:
    """Stops every recorded member and deletes the cluster's scratch files (its caller holds the lock)."""
    names = members(paths)
    if not names:
        if not quiet:
            log(f"not running ({paths.dir})")
        return
    end(paths, names, quiet=quiet)
    with contextlib.suppress(FileNotFoundError):
        os.remove(paths.env_file)
    shutil.rmtree(paths.tmp, ignore_errors=True)


@contextlib.contextmanager
def cluster_lock(paths: ClusterPaths) -> Iterator[None]:
    """Holds the cluster's lock: a second `start` or `stop` of the same folder waits for this one.

    A `flock` ends with the process holding it, so a killed `start` never leaves the folder
    locked. The descriptor is not inherited (Python's default), so the members, which outlive
    `start`, never hold it.
    """
    os.makedirs(paths.dir, exist_ok=True)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another start or stop of the cluster in {paths.dir}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- configuration -------------------------------------------------------------------------------
class PortsUnavailable(OSError):
    """No pool port is free on every pool address."""


def choose_ports(task_managers: int, pool_candidates: Iterable[int] | None = None) -> tuple[int, int, int]:
    """(REST, RPC, POOL): two ports free on 127.0.0.1, and one free on every pool address.

    `pool_candidates` are the pool ports to try in turn (0: one the kernel picks on the first
    pool address); by default 100 picks by the kernel. The ports are released on return, so
    another program may still take one before the cluster does.
    """
    # Every socket stays open until the end, failed attempts' too: the kernel then never offers
    # the same port twice.
    held: list[socket.socket] = []

    def bind(ip: str, port: int = 0) -> int:
        held.append(scaleout.bound_socket(ip, port))
        return held[-1].getsockname()[1]

    try:
        rest, rpc = bind("127.0.0.1"), bind("127.0.0.1")
        ips = [pool_ip(number) for number in range(1, task_managers + 1)]
        for candidate in (pool_candidates if pool_candidates is not None else [0] * 100):
            try:
                pool = bind(ips[0], candidate)
                for ip in ips[1:]:
                    bind(ip, pool)
            except OSError:
                continue
            return rest, rpc, pool
        raise PortsUnavailable(f"no port is free on all of {', '.join(ips)}")
    finally:
        for s in held:
            s.close()


def task_manager_jvm_flags() -> tuple[str, ...]:
    """A TaskManager JVM's memory limits, as its configured pools add up (TASK_MANAGER_MEMORY_MB).

    Heap = framework + task heap; direct memory = framework + task off-heap + network; metaspace.
    """
    mb = TASK_MANAGER_MEMORY_MB
    heap = mb["taskmanager.memory.framework.heap.size"] + mb["taskmanager.memory.task.heap.size"]
    direct = (mb["taskmanager.memory.framework.off-heap.size"] + mb["taskmanager.memory.task.off-heap.size"]
              + mb["taskmanager.memory.network.max"])
    return (f"-Xms{heap}m", f"-Xmx{heap}m", f"-XX:MaxDirectMemorySize={direct}m",
            f"-XX:MaxMetaspaceSize={mb['taskmanager.memory.jvm-metaspace.size']}m")


def flink_conf(rest_port: int, rpc_port: int, slots: int, tmp_dir: str) -> str:
    """The text of flink-conf.yaml: every address the loopback's, every TaskManager memory pool set."""
    memory = "".join(f"{key}: {size}m\n" for key, size in TASK_MANAGER_MEMORY_MB.items())
    return (f"jobmanager.rpc.address: localhost\n"
            f"jobmanager.rpc.port: {rpc_port}\n"
            f"jobmanager.bind-host: localhost\n"
            f"jobmanager.memory.process.size: 768m\n"
            f"rest.address: localhost\n"
            f"rest.bind-address: localhost\n"
            f"rest.port: {rest_port}\n"
            f"taskmanager.host: localhost\n"
            f"taskmanager.bind-host: localhost\n"
            f"taskmanager.numberOfTaskSlots: {slots}\n"
            f"taskmanager.cpu.cores: {slots}\n"
            f"{memory}"
            "# A batch job's tasks run side by side in one slot, and each sort-merge result partition takes\n"
            "# this many 32 KB network buffers (Flink's default, 512, runs out of 128m after a few tasks).\n"
            "taskmanager.network.sort-shuffle.min-buffers: 64\n"
            "# Spread a job's slots over all TaskManagers.\n"
            "cluster.evenly-spread-out-slots: true\n"
            "# A TaskManager that dies is noticed within seconds instead of the default 50.\n"
            "heartbeat.interval: 2000\n"
            "heartbeat.timeout: 20000\n"
            f"io.tmp.dirs: {tmp_dir}\n"
            f"blob.storage.directory: {tmp_dir}\n"
            f"web.tmpdir: {tmp_dir}\n"
            f"{KEEPS_SDK_WORKERS}")


def write_conf(paths: ClusterPaths, rest_port: int, rpc_port: int, slots: int) -> None:
    """Writes CONF/flink-conf.yaml (and makes the scratch folder it names)."""
    os.makedirs(paths.conf, exist_ok=True)
    os.makedirs(paths.tmp, exist_ok=True)
    _write_atomically(os.path.join(paths.conf, "flink-conf.yaml"), flink_conf(rest_port, rpc_port, slots, paths.tmp))


def hosts_file_text(number: int) -> str:
    """TaskManager `number`'s hosts file: the pool's host name is its own pool's address."""
    return f"127.0.0.1 localhost {socket.gethostname()}\n{pool_ip(number)} {POOL_HOST}\n"


def read_ports_file(paths: ClusterPaths) -> tuple[int, int, int] | None:
    """(REST, POOL, TASK_MANAGERS) of the cluster's ports file, or None without a readable one."""
    try:
        with open(paths.ports_file, encoding="utf-8") as f:
            rest, pool, task_managers = (int(field) for field in f.read().split())
        return rest, pool, task_managers
    except (OSError, ValueError):
        return None


def endpoints_text(paths: ClusterPaths, rest_port: int, pool_port: int, task_managers: int) -> str:
    """The KEY=VALUE lines `start` prints (and keeps in cluster.env)."""
    pools = ",".join(f"{pool_ip(number)}:{pool_port}" for number in range(1, task_managers + 1))
    return (f"FLINK_REST=localhost:{rest_port}\nFLINK_ENVIRONMENT_CONFIG={POOL_HOST}:{pool_port}\n"
            f"FLINK_WORKER_POOLS={pools}\nFLINK_CLUSTER_DIR={paths.dir}\n")


# --- members -------------------------------------------------------------------------------------
def find_lib(environ: dict[str, str]) -> str:
    """The folder of Flink + Beam runner jars: FLINK_LIB, else the lib/ beside the job server launcher."""
    if environ.get("FLINK_LIB"):
        return os.path.abspath(environ["FLINK_LIB"])
    # The job server script says on stderr what it does (Maven, the first time) and what fails.
    result = subprocess.run(["bash", JOB_SERVER_SCRIPT], check=False, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise ClusterError()
    jar = result.stdout.strip()
    lib = os.path.join(os.path.dirname(jar), "lib")
    if not os.path.isdir(lib):
        raise ClusterError(f"no lib/ of Flink jars beside {jar} (an official shaded job server jar); "
                           "set FLINK_LIB to a folder of Flink 1.19 jars")
    return lib


def job_manager_command(paths: ClusterPaths, lib: str) -> list[str]:
    """The JobManager's command line (`java` expands the classpath's `lib/*` itself)."""
    return ["java", *JAVA_MODULE_OPTS, f"-Xms{JOB_MANAGER_HEAP}", f"-Xmx{JOB_MANAGER_HEAP}",
            "-cp", os.path.join(lib, "*"), JOB_MANAGER_MAIN, "--configDir", paths.conf]


def task_manager_command(paths: ClusterPaths, lib: str, number: int) -> list[str]:
    """TaskManager `number`'s command line: the launcher's jars (KEEPS_SDK_WORKERS), its own hosts file, a fixed
    resource id."""
    return ["java", *JAVA_MODULE_OPTS, *task_manager_jvm_flags(),
            f"-Djdk.net.hosts.file={paths.hosts_file(number)}", "-cp", os.path.join(lib, "*"),
            TASK_MANAGER_MAIN, "--configDir", paths.conf, f"-Dtaskmanager.resource-id=taskmanager-{number}"]


def start_job_manager(paths: ClusterPaths, lib: str) -> None:
    """Starts the JobManager."""
    launch(paths, "jobmanager", os.path.join(paths.dir, "jobmanager"), job_manager_command(paths, lib))


def start_task_manager(paths: ClusterPaths, lib: str, number: int) -> None:
    """Starts TaskManager `number`, after writing its hosts file."""
    _write_atomically(paths.hosts_file(number), hosts_file_text(number))
    name = f"taskmanager-{number}"
    launch(paths, name, os.path.join(paths.dir, name), task_manager_command(paths, lib, number))


def start_worker_pool(paths: ClusterPaths, number: int, pool_port: int) -> None:
    """Starts TaskManager `number`'s worker pool at its own loopback address."""
    # The pool starts each SDK worker with the `python` first on PATH: the venv's.
    path = os.pathsep.join(part for part in (os.path.dirname(VENV_PYTHON), os.environ.get("PATH")) if part)
    env = dict(os.environ, PATH=path, TF_CPP_MIN_LOG_LEVEL="3")
    name = f"worker-pool-{number}"
    launch(paths, name, os.path.join(paths.dir, name),
           [VENV_PYTHON, WORKER_POOL_SCRIPT, f"--address={pool_ip(number)}:{pool_port}"], env=env)


# --- waiting -------------------------------------------------------------------------------------
# The cluster is on the loopback: an http_proxy in the environment must not see its requests.
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def registered_task_managers(rest_port: int, timeout: float = 5) -> int | None:
    """How many TaskManagers the REST API at localhost:`rest_port` lists; None when it does not answer."""
    try:
        with _NO_PROXY_OPENER.open(f"http://localhost:{rest_port}/taskmanagers", timeout=timeout) as response:
            return len(json.load(response)["taskmanagers"])
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
        return None  # Not up yet (refused, an error page, not JSON, starting up).


def task_manager_registered(paths: ClusterPaths, number: int) -> bool:
    """Whether TaskManager `number`'s current log says the JobManager accepted it."""
    try:
        with open(paths.log_file(f"taskmanager-{number}"), encoding="utf-8", errors="replace") as f:
            return REGISTERED_LINE in f.read()
    except OSError:
        return False


def wait_until_up(paths: ClusterPaths, task_managers: int, rest_port: int, pool_port: int, timeout: float,
                  interval: float = 0.5) -> None:
    """Waits until the REST API lists `task_managers` TaskManagers, each registered, each pool listening.

    Raises StartFailed when a member exits first, or after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        for name in members(paths):
            if running_pid(paths, name) is None:
                raise StartFailed(f"{name} exited during start-up (log: {paths.log_file(name)})")
        count = registered_task_managers(rest_port)
        up = all(scaleout.accepts_connections(pool_ip(number), pool_port) and task_manager_registered(paths, number)
                 for number in range(1, task_managers + 1))
        if (count or 0) >= task_managers and up:
            return
        if time.monotonic() >= deadline:
            raise StartFailed(f"not up after {timeout}s: the REST API lists "
                              f"{'no' if count is None else count} of {task_managers} TaskManagers")
        time.sleep(interval)


def print_logs(paths: ClusterPaths, lines: int = 40) -> None:
    """The end of every member's log, on stderr (why a start failed)."""
    for path in sorted(glob.glob(os.path.join(glob.escape(paths.logs), "*.log"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        print(f"----- {path} (last {lines} lines)", *tail, sep="\n", file=sys.stderr, flush=True)


# --- subcommands ---------------------------------------------------------------------------------
def start(paths: ClusterPaths, task_managers: int, slots: int, timeout: int, environ: dict[str, str]) -> int:
    """`start`: brings the cluster up, or back (what of it is missing); prints its endpoints. The exit code.

    `environ` gives the settings (FLINK_LIB); the members inherit this process's environment.
    """
    if shutil.which("java") is None:
        raise ClusterError("java is not on PATH (Java 11+, 17 recommended)")
    if not os.access(VENV_PYTHON, os.X_OK):
        raise ClusterError(f"no {VENV_PYTHON}: run scripts/test.sh or scripts/run_local.sh once")
    lib = find_lib(environ)  # Before the lock: the first time it runs Maven for minutes.
    os.makedirs(paths.pids, exist_ok=True)
    os.makedirs(paths.logs, exist_ok=True)
    with cluster_lock(paths):
        previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            _start_locked(paths, lib, task_managers, slots, timeout)
        except PortsUnavailable as error:  # Nothing was started.
            log(f"error: {error}")
            return 1
        except (StartFailed, _Interrupted) as error:
            # Stopping what was started must not be cut short by a second Ctrl-C: it takes at
            # most STOP_GRACE_S, and would otherwise leave members running unrecorded.
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            log(f"error: {str(error) or 'interrupted'}")
            print_logs(paths)
            stop_members(paths)
            return 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    with open(paths.env_file, encoding="utf-8") as f:
        sys.stdout.write(f.read())
    sys.stdout.flush()
    return 0


def _start_locked(paths: ClusterPaths, lib: str, task_managers: int, slots: int, timeout: int) -> None:
    """`start` once it holds the lock; raises StartFailed, PortsUnavailable or _Interrupted."""
    ports = read_ports_file(paths) if running_pid(paths, "jobmanager") is not None else None
    repair = ports is not None
    if ports is not None:  # Same configuration and ports as the members still running.
        rest_port, pool_port, recorded = ports
        if recorded != task_managers:
            log(f"the cluster runs with {recorded} TaskManagers, so {recorded} it stays (stop it to change that)")
        task_managers = recorded
    else:
        stop_members(paths, quiet=True)  # What is left of a cluster that died.
        rest_port, rpc_port, pool_port = choose_ports(task_managers)
        write_conf(paths, rest_port, rpc_port, slots)
        _write_atomically(paths.ports_file, f"{rest_port} {pool_port} {task_managers}\n")
        for path in glob.glob(os.path.join(glob.escape(paths.logs), "*.log*")):
            if path.endswith((".log", ".log.previous")):
                os.remove(path)
        log(f"starting a JobManager and {task_managers} TaskManagers, each with a worker pool, in {paths.dir}")
        start_job_manager(paths, lib)
    restarted = False
    for number in range(1, task_managers + 1):
        task_manager, pool = f"taskmanager-{number}", f"worker-pool-{number}"
        if running_pid(paths, task_manager) is None:
            # A TaskManager comes back with a fresh pool, as a restarted machine would: the old
            # pool's workers served the dead TaskManager.
            if repair:
                log(f"restarting {task_manager} and {pool}")
                end(paths, [task_manager, pool])
                restarted = True
            start_worker_pool(paths, number, pool_port)
            start_task_manager(paths, lib, number)
        elif running_pid(paths, pool) is None:
            log(f"restarting {pool}")
            end(paths, [pool])
            restarted = True
            start_worker_pool(paths, number, pool_port)
    if repair and not restarted:
        log(f"already running ({paths.dir})")
    wait_until_up(paths, task_managers, rest_port, pool_port, timeout)
    _write_atomically(paths.env_file, endpoints_text(paths, rest_port, pool_port, task_managers))
    log(f"up: REST API at localhost:{rest_port}, {task_managers} TaskManagers registered (logs: {paths.logs})")


def stop(paths: ClusterPaths) -> int:
    """`stop`: ends every recorded member and deletes the scratch files; safe to call twice. The exit code."""
    if not members(paths):  # Not even a folder to lock is made for a cluster that never ran.
        log(f"not running ({paths.dir})")
        return 0
    with cluster_lock(paths):
        stop_members(paths)
    return 0


def status(paths: ClusterPaths) -> int:
    """`status`: each member (running or not), how many TaskManagers the REST API lists, the endpoints."""
    ports = read_ports_file(paths)
    return show_status(paths, "TaskManagers registered",
                       None if ports is None else lambda: registered_task_managers(ports[0]))


def show_status(paths: ClusterPaths, counted: str, count: Callable[[], int | None] | None) -> int:
    """A cluster script's `status` (this one's and spark_cluster.py's): each member, running or not, the
    `counted` members its master lists (`count()`, where the ports file was read), and the endpoints."""
    names = members(paths)
    if not names:
        print(f"not running ({paths.dir})")
        return 0
    for name in names:
        pid = running_pid(paths, name)
        print(f"{name}: running (pid {pid})" if pid is not None else f"{name}: not running")
    if count is not None:
        number = count()
        print(f"{counted}: {'' if number is None else number}")
    if os.path.isfile(paths.env_file):
        with open(paths.env_file, encoding="utf-8") as f:
            sys.stdout.write(f.read())
    return 0


def _whole_number(text: str) -> int | None:
    """`text` as a whole number (ASCII digits only), or None."""
    return int(text) if re.fullmatch(r"[0-9]+", text) else None


def parse_args(argv: Sequence[str], environ: dict[str, str]) -> tuple[str, int]:
    """(subcommand, TaskManagers) from the command line and FLINK_TASK_MANAGERS; ClusterError when wrong."""
    command, task_managers = command_and_count(argv, "--task_managers", environ.get("FLINK_TASK_MANAGERS") or "2")
    number = _whole_number(task_managers)
    if not number:
        raise ClusterError(f"the number of TaskManagers must be a whole number from 1 to {MAX_TASK_MANAGERS}")
    if number > MAX_TASK_MANAGERS:
        raise ClusterError(f"at most {MAX_TASK_MANAGERS} TaskManagers (one loopback address each)")
    check_command(command)
    return command, number


def command_and_count(argv: Sequence[str], flag: str, default: str) -> tuple[str, str]:
    """(subcommand, the text of `flag`'s count, else `default`) of `SUBCOMMAND [FLAG N | FLAG=N]`; UsageError on
    anything else. The subcommand is checked by `check_command`, after the count (a wrong count is named first)."""
    if not argv:
        raise UsageError()
    command, rest = argv[0], list(argv[1:])
    count = default
    while rest:
        arg = rest.pop(0)
        if arg.startswith(f"{flag}="):
            count = arg.split("=", 1)[1]
        elif arg == flag:
            count = rest.pop(0) if rest else ""
        else:
            raise UsageError()
    return command, count


def check_command(command: str) -> None:
    """UsageError unless `command` is one of the cluster scripts' subcommands."""
    if command not in ("start", "stop", "status"):
        raise UsageError()


def _setting(environ: dict[str, str], name: str, default: str) -> int:
    """A whole-number setting of `start` from the environment; ClusterError when it is not one."""
    value = _whole_number(environ.get(name) or default)
    if not value:
        raise ClusterError(f"{name} must be a whole number from 1 up")
    return value


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """The command line (see the module's docstring); returns the exit code."""
    environ = dict(os.environ) if environ is None else environ

    def run(argv: Sequence[str]) -> int:
        command, task_managers = parse_args(argv, environ)
        paths = ClusterPaths(environ.get("FLINK_CLUSTER_DIR") or os.path.join(ROOT, ".cache", "flink", "cluster"))
        if command == "stop":
            return stop(paths)
        if command == "status":
            return status(paths)
        return start(paths, task_managers, _setting(environ, "FLINK_TASK_SLOTS", "1"),
                     _setting(environ, "FLINK_CLUSTER_TIMEOUT", "180"), environ)
    return run_command(run, sys.argv[1:] if argv is None else argv, USAGE)


def run_command(run: Callable[[Sequence[str]], int], argv: Sequence[str], usage: str) -> int:
    """`run(argv)`'s exit code, a cluster script's errors made exit codes: the usage (exit 2), one line (2)."""
    try:
        return run(argv)
    except UsageError:
        print(usage, file=sys.stderr)
        return 2
    except ClusterError as error:
        if str(error):
            log(f"error: {error}")
        return 2
    except KeyboardInterrupt:  # Ctrl-C before `start` took the lock (e.g. while Maven ran): no traceback.
        return 130


if __name__ == "__main__":
    # `status | head` ends quietly, as a shell command does, not with a BrokenPipeError. (Here,
    # not in main(): tests call main() inside pytest.) The members get SIGPIPE's default anyway.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
