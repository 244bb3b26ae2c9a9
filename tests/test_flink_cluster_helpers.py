"""The parts of tests/flink_cluster.py that need no Java: ports, configuration, PID files, the REST poll.

Real processes, sockets and an HTTP server on the loopback stand in for the cluster's members;
nothing of flink_cluster itself is replaced. The standing-cluster suite (tests/test_flink_cluster.py,
run by scripts/flink_integration_test.sh) starts the real cluster.
"""

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import flink_cluster
import scaleout
from flink_cluster import ClusterPaths

# A process that sleeps; a member's words appended to its command line make it look like that member.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def wait_gone(pid, limit=30):
    """Waits until no live process has `pid` (the signals are sent; the kernel takes a moment)."""
    deadline = time.monotonic() + limit
    while not flink_cluster.process_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return flink_cluster.process_gone(pid)


@pytest.fixture
def paths(tmp_path):
    paths = ClusterPaths(str(tmp_path / "cluster"))
    os.makedirs(paths.pids)
    os.makedirs(paths.logs)
    return paths


@pytest.fixture
def sleeper():
    """Another program (not a member): it must survive anything done to a stale PID file."""
    process = subprocess.Popen(SLEEPER)
    yield process
    process.kill()
    process.wait()


def launch_fake_member(paths, name, *extra):
    """A sleeper launched as member `name` (its command line holds the member's words)."""
    command = [*SLEEPER, *flink_cluster.member_command_words(paths, name), *extra]
    return flink_cluster.launch(paths, name, os.path.join(paths.dir, name), command)


def write_pid_file(paths, name, pid, started):
    with open(paths.pid_file(name), "w") as f:
        f.write(f"{pid} {started}\n")


# --- ports ----------------------------------------------------------------------------------------
def test_chosen_ports_are_distinct_and_free_on_their_loopback_addresses():
    rest, rpc, pool = flink_cluster.choose_ports(3)
    assert rest != rpc
    # Released on return, so the cluster can bind them: on 127.0.0.1, and on every pool address.
    for ip, port in [("127.0.0.1", rest), ("127.0.0.1", rpc), ("127.0.0.2", pool), ("127.0.0.3", pool),
                     ("127.0.0.4", pool)]:
        scaleout.bound_socket(ip, port).close()


def test_a_pool_port_taken_on_one_pool_address_is_skipped():
    with scaleout.bound_socket("127.0.0.3") as taken:
        taken.listen()
        port = taken.getsockname()[1]
        _, _, pool = flink_cluster.choose_ports(2, pool_candidates=[port, 0])
        assert pool != port
        with pytest.raises(flink_cluster.PortsUnavailable, match="127.0.0.2, 127.0.0.3"):
            flink_cluster.choose_ports(2, pool_candidates=[port])


def test_pools_get_loopback_addresses_of_their_own():
    ips = [flink_cluster.pool_ip(number) for number in range(1, flink_cluster.MAX_TASK_MANAGERS + 1)]
    assert ips[:2] == ["127.0.0.2", "127.0.0.3"] and ips[-1] == "127.0.0.251"
    assert len(set(ips)) == len(ips)
    assert "127.0.0.1" not in ips  # localhost: the JobManager's and the TaskManagers' own
    lines = flink_cluster.hosts_file_text(2).splitlines()
    assert lines[0].startswith("127.0.0.1 localhost ")
    assert lines[1] == "127.0.0.3 beam-worker-pool"


# --- configuration --------------------------------------------------------------------------------
def read_conf(text):
    return dict(line.split(": ", 1) for line in text.splitlines() if line and not line.startswith("#"))


def megabytes(size):
    assert size.endswith("m"), size
    return int(size[:-1])


def test_written_conf_has_the_ports_slots_and_loopback_only_addresses(paths):
    flink_cluster.write_conf(paths, 4101, 4102, 3)
    with open(os.path.join(paths.conf, "flink-conf.yaml")) as f:
        conf = read_conf(f.read())
    assert (conf["rest.port"], conf["jobmanager.rpc.port"]) == ("4101", "4102")
    assert conf["taskmanager.numberOfTaskSlots"] == conf["taskmanager.cpu.cores"] == "3"
    addresses = {key: value for key, value in conf.items()
                 if key.endswith((".address", ".bind-address", ".bind-host", ".host"))}
    assert set(addresses) == {"jobmanager.rpc.address", "jobmanager.bind-host", "rest.address",
                              "rest.bind-address", "taskmanager.host", "taskmanager.bind-host"}
    assert set(addresses.values()) == {"localhost"}
    assert conf["io.tmp.dirs"] == conf["blob.storage.directory"] == conf["web.tmpdir"] == paths.tmp
    assert os.path.isdir(paths.tmp)


def test_every_task_manager_memory_pool_is_set_and_the_jvm_limits_add_up(paths):
    conf = read_conf(flink_cluster.flink_conf(1, 2, 1, paths.tmp))
    # A TaskManager started without Flink's scripts refuses to start without each of these.
    memory = {key[len("taskmanager.memory."):]: megabytes(value) for key, value in conf.items()
              if key.startswith("taskmanager.memory.")}
    assert set(memory) == {"framework.heap.size", "task.heap.size", "framework.off-heap.size",
                           "task.off-heap.size", "managed.size", "network.min", "network.max",
                           "jvm-metaspace.size", "jvm-overhead.min", "jvm-overhead.max"}
    flags = dict(flag.split("=", 1) if "=" in flag else (flag[:4], flag[4:])
                 for flag in flink_cluster.task_manager_jvm_flags())
    heap = memory["framework.heap.size"] + memory["task.heap.size"]
    assert megabytes(flags["-Xms"]) == megabytes(flags["-Xmx"]) == heap
    direct = memory["framework.off-heap.size"] + memory["task.off-heap.size"] + memory["network.max"]
    assert megabytes(flags["-XX:MaxDirectMemorySize"]) == direct
    assert megabytes(flags["-XX:MaxMetaspaceSize"]) == memory["jvm-metaspace.size"]


def test_task_managers_load_beams_runner_parent_first(paths):
    # Beam keeps a job's SDK worker between stages only for its classes loaded by Flink's parent classloader.
    command = flink_cluster.task_manager_command(paths, "/jars/lib", 1)
    assert command[command.index("-cp") + 1] == "/jars/lib/*"  # Flink's and Beam's jars, as the JobManager's.
    conf = dict(line.split(": ", 1) for line in flink_cluster.flink_conf(1, 2, 1, "/tmp/x").splitlines()
                if line and not line.startswith("#"))
    assert conf["classloader.resolve-order"] == "parent-first"


def test_endpoints_name_every_pool_in_task_manager_order(paths):
    assert flink_cluster.endpoints_text(paths, 8081, 50000, 3).splitlines() == [
        "FLINK_REST=localhost:8081", "FLINK_ENVIRONMENT_CONFIG=beam-worker-pool:50000",
        "FLINK_WORKER_POOLS=127.0.0.2:50000,127.0.0.3:50000,127.0.0.4:50000", f"FLINK_CLUSTER_DIR={paths.dir}"]


# --- PID files ------------------------------------------------------------------------------------
def test_a_running_member_is_found_and_stop_ends_its_whole_group(paths, tmp_path):
    # A pool that has started an SDK worker (in its process group), and says the worker's PID.
    worker_pid_file = tmp_path / "worker.pid"
    starts_a_worker = ("import subprocess, sys, time; "
                       "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                       "open(sys.argv[1], 'w').write(str(worker.pid)); time.sleep(120)")
    member = flink_cluster.launch(paths, "worker-pool-1", os.path.join(paths.dir, "worker-pool-1"),
                                  [sys.executable, "-c", starts_a_worker, str(worker_pid_file),
                                   *flink_cluster.member_command_words(paths, "worker-pool-1")])
    deadline = time.monotonic() + 60
    while not worker_pid_file.exists() or not worker_pid_file.read_text():
        assert member.poll() is None and time.monotonic() < deadline, "the pool did not start its worker"
        time.sleep(0.05)
    worker_pid = int(worker_pid_file.read_text())
    assert flink_cluster.running_pid(paths, "worker-pool-1") == member.pid
    assert flink_cluster.members(paths) == ["worker-pool-1"]

    flink_cluster.stop_members(paths)
    assert member.wait(timeout=30) is not None
    assert wait_gone(worker_pid), "the pool's worker outlived the stop"
    assert not os.path.exists(paths.pid_file("worker-pool-1"))
    assert flink_cluster.members(paths) == []


def test_a_pid_file_of_a_process_that_has_ended_is_stale(paths):
    member = launch_fake_member(paths, "taskmanager-1")
    member.kill()
    member.wait()
    assert flink_cluster.running_pid(paths, "taskmanager-1") is None
    flink_cluster.stop_members(paths)  # Nothing to signal: the file goes.
    assert flink_cluster.members(paths) == []


def test_a_zombie_member_is_not_running(paths):
    member = launch_fake_member(paths, "taskmanager-1")
    member.kill()
    assert wait_gone(member.pid)  # Not reaped yet: a zombie that still has the PID.
    assert os.path.exists(f"/proc/{member.pid}")
    # Ended, though its PID is still taken: `stop` does not wait STOP_GRACE_S for it.
    assert flink_cluster.process_start_time(member.pid) is None
    assert flink_cluster.running_pid(paths, "taskmanager-1") is None
    member.wait()


def test_a_pid_reused_by_another_program_is_left_alone(paths, sleeper):
    # The recorded start time is not the process's: a later process took the PID.
    started = flink_cluster.process_start_time(sleeper.pid)
    write_pid_file(paths, "jobmanager", sleeper.pid, int(started) - 1)
    assert flink_cluster.running_pid(paths, "jobmanager") is None
    flink_cluster.stop_members(paths)
    assert sleeper.poll() is None
    assert flink_cluster.members(paths) == []


def test_a_pid_reused_by_a_later_member_like_process_is_left_alone(paths):
    # Its command line is a JobManager's of this folder, but it is not the process recorded.
    later = launch_fake_member(paths, "jobmanager")
    try:
        write_pid_file(paths, "jobmanager", later.pid, int(flink_cluster.process_start_time(later.pid)) - 1)
        assert flink_cluster.running_pid(paths, "jobmanager") is None
        flink_cluster.stop_members(paths)
        assert later.poll() is None
    finally:
        later.kill()
        later.wait()


def test_a_pid_whose_command_line_is_not_the_members_is_left_alone(paths, sleeper):
    # Even with the recorded start time, /proc/PID/cmdline must be the member's.
    write_pid_file(paths, "jobmanager", sleeper.pid, flink_cluster.process_start_time(sleeper.pid))
    assert flink_cluster.running_pid(paths, "jobmanager") is None
    flink_cluster.end(paths, ["jobmanager"])
    assert sleeper.poll() is None
    assert not os.path.exists(paths.pid_file("jobmanager"))


def test_a_member_of_another_cluster_folder_is_not_this_clusters(paths, tmp_path):
    other = ClusterPaths(str(tmp_path / "other"))
    os.makedirs(other.pids)
    os.makedirs(other.logs)
    process = launch_fake_member(other, "taskmanager-2")
    try:
        write_pid_file(paths, "taskmanager-2", process.pid, flink_cluster.process_start_time(process.pid))
        assert flink_cluster.running_pid(other, "taskmanager-2") == process.pid
        assert flink_cluster.running_pid(paths, "taskmanager-2") is None
        assert flink_cluster.running_pid(paths, "taskmanager-1") is None
    finally:
        process.kill()
        process.wait()


def test_unreadable_pid_files_are_stale(paths):
    for name, text in [("taskmanager-1", ""), ("taskmanager-2", "not-a-pid 12"), ("jobmanager", "123")]:
        with open(paths.pid_file(name), "w") as f:
            f.write(text)
        assert flink_cluster.running_pid(paths, name) is None
    flink_cluster.stop_members(paths)
    assert flink_cluster.members(paths) == []


def test_members_are_listed_task_managers_first_in_numeric_order(paths):
    for name in ("jobmanager", "worker-pool-10", "taskmanager-10", "worker-pool-2", "taskmanager-2"):
        write_pid_file(paths, name, 1, "")
    assert flink_cluster.members(paths) == ["taskmanager-2", "taskmanager-10", "worker-pool-2",
                                            "worker-pool-10", "jobmanager"]


def test_a_restarted_member_keeps_its_previous_log_once(paths):
    for round_ in range(3):
        process = flink_cluster.launch(paths, "jobmanager", os.path.join(paths.dir, "jobmanager"),
                                       [sys.executable, "-c", f"print({round_})"])
        process.wait()
    with open(paths.log_file("jobmanager")) as f, open(paths.log_file("jobmanager") + ".previous") as g:
        assert (f.read(), g.read()) == ("2\n", "1\n")


# --- the CLI without Java -------------------------------------------------------------------------
def test_status_and_stop_of_a_cluster_with_stale_pid_files(paths, sleeper, capsys):
    write_pid_file(paths, "jobmanager", sleeper.pid, flink_cluster.process_start_time(sleeper.pid))
    member = launch_fake_member(paths, "taskmanager-1")
    environ = {"FLINK_CLUSTER_DIR": paths.dir}
    assert flink_cluster.main(["status"], environ) == 0
    assert capsys.readouterr().out.splitlines() == [f"taskmanager-1: running (pid {member.pid})",
                                                    "jobmanager: not running"]
    assert flink_cluster.main(["stop"], environ) == 0
    assert "stopped taskmanager-1" in capsys.readouterr().err
    assert member.wait(timeout=30) is not None and sleeper.poll() is None
    # Stopping again, and asking, find nothing.
    assert flink_cluster.main(["stop"], environ) == 0
    assert capsys.readouterr().err == f"flink_cluster: not running ({paths.dir})\n"
    assert flink_cluster.main(["status"], environ) == 0
    assert capsys.readouterr().out == f"not running ({paths.dir})\n"


@pytest.mark.parametrize("argv, environ, message", [
    ([], {}, "scripts/flink_cluster.sh start [--task_managers N]"),
    (["restart"], {}, "scripts/flink_cluster.sh status"),
    (["stop", "--workers", "2"], {}, "scripts/flink_cluster.sh stop"),
    (["start", "--task_managers", "0"], {}, "must be a whole number from 1 to 250"),
    (["start", "--task_managers"], {}, "must be a whole number from 1 to 250"),
    (["status"], {"FLINK_TASK_MANAGERS": "two"}, "must be a whole number from 1 to 250"),
    (["start", "--task_managers=251"], {}, "at most 250 TaskManagers"),
])
def test_wrong_command_lines_exit_2(argv, environ, message, tmp_path, capsys):
    environ = dict(environ, FLINK_CLUSTER_DIR=str(tmp_path / "cluster"))
    assert flink_cluster.main(argv, environ) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "cluster").exists()


def test_the_flag_wins_over_the_environment():
    assert flink_cluster.parse_args(["start", "--task_managers=3"], {"FLINK_TASK_MANAGERS": "5"}) == ("start", 3)
    assert flink_cluster.parse_args(["stop"], {"FLINK_TASK_MANAGERS": "5"}) == ("stop", 5)
    assert flink_cluster.parse_args(["status"], {}) == ("status", 2)


def test_a_second_start_or_stop_waits_for_the_lock(paths):
    acquired = threading.Event()

    def second():
        with flink_cluster.cluster_lock(paths):
            acquired.set()

    with flink_cluster.cluster_lock(paths):
        thread = threading.Thread(target=second)
        thread.start()
        assert not acquired.wait(0.5)  # Still waiting while the first holds the lock.
    thread.join(timeout=30)
    assert acquired.is_set()


# --- the REST poll --------------------------------------------------------------------------------
@pytest.fixture
def rest_api():
    """A REST API on localhost whose /taskmanagers lists `rest_api.listed` TaskManagers."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/taskmanagers" or server.listed is None:
                self.send_error(503)
                return
            body = json.dumps({"taskmanagers": [{"id": f"taskmanager-{n}"} for n in range(server.listed)]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.listed = 0
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_registered_task_managers_reads_the_rest_api(rest_api):
    port = rest_api.server_address[1]
    rest_api.listed = 2
    assert flink_cluster.registered_task_managers(port) == 2
    rest_api.listed = None  # an error page
    assert flink_cluster.registered_task_managers(port) is None
    assert flink_cluster.registered_task_managers(scaleout.free_port()) is None  # nothing listens


@pytest.fixture
def pools():
    """Two listening sockets where the pools of TaskManagers 1 and 2 listen; yields their port."""
    with scaleout.bound_socket("127.0.0.2") as first:
        port = first.getsockname()[1]
        with scaleout.bound_socket("127.0.0.3", port) as second:
            first.listen()
            second.listen()
            yield port


def register_in_logs(paths, *numbers):
    for number in numbers:
        with open(paths.log_file(f"taskmanager-{number}"), "w") as f:
            f.write(f"... {flink_cluster.REGISTERED_LINE} akka.tcp://flink@localhost:6123 ...\n")


def test_the_cluster_is_up_once_every_task_manager_is_listed_registered_and_has_its_pool(
        paths, rest_api, pools):
    rest_api.listed = 2
    register_in_logs(paths, 1, 2)
    flink_cluster.wait_until_up(paths, 2, rest_api.server_address[1], pools, timeout=60, interval=0.05)


@pytest.mark.parametrize("listed, registered, expected", [
    (1, (1, 2), "lists 1 of 2 TaskManagers"),         # one not listed by the REST API
    (None, (1, 2), "lists no of 2 TaskManagers"),      # the REST API does not answer
    (2, (1,), "lists 2 of 2 TaskManagers"),            # taskmanager-2's log has no registration
])
def test_the_rest_poll_gives_up_after_its_timeout(paths, rest_api, pools, listed, registered, expected):
    rest_api.listed = listed
    register_in_logs(paths, *registered)
    with pytest.raises(flink_cluster.StartFailed, match=f"not up after 1s: the REST API {expected}"):
        flink_cluster.wait_until_up(paths, 2, rest_api.server_address[1], pools, timeout=1, interval=0.05)


def test_the_rest_poll_gives_up_when_a_pool_does_not_listen(paths, rest_api):
    rest_api.listed = 2
    register_in_logs(paths, 1, 2)
    with (scaleout.bound_socket("127.0.0.2") as only_first,  # bound, not listening
          pytest.raises(flink_cluster.StartFailed, match="not up after 0s")):
        flink_cluster.wait_until_up(paths, 2, rest_api.server_address[1], only_first.getsockname()[1], timeout=0)


def test_a_member_that_exits_fails_the_start_at_once(paths, rest_api):
    member = launch_fake_member(paths, "worker-pool-2")
    member.kill()
    member.wait()
    log = paths.log_file("worker-pool-2")
    expected = re.escape(f"worker-pool-2 exited during start-up (log: {log})")
    with pytest.raises(flink_cluster.StartFailed, match=expected):
        flink_cluster.wait_until_up(paths, 2, rest_api.server_address[1], 1, timeout=60)


def test_a_signal_during_a_launch_interrupts_start_only_once_the_member_is_recorded(paths):
    previous = signal.signal(signal.SIGUSR1, flink_cluster._on_signal)  # start's handler, on a spare signal
    recorded = []
    try:
        with pytest.raises(flink_cluster._Interrupted), flink_cluster._signals_deferred():
            os.kill(os.getpid(), signal.SIGUSR1)
            recorded.append("PID file")  # still reached: the handler only noted the signal
        assert recorded == ["PID file"]
        with pytest.raises(flink_cluster._Interrupted):  # outside a launch, at once
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGUSR1, previous)
