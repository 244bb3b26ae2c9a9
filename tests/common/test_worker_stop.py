"""The local runner's worker processes stop with the launcher: killed on Ctrl-C, and dying with it."""

import os
import signal
import subprocess
import sys
import time

import pytest

from beam_pipeline.common import runners

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")


def _gone(pid, bound=30.0):
    """Whether `pid` is gone (or a zombie) within `bound` seconds: a bound for a loaded machine, not a timing."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


def test_the_multi_processing_workers_run_through_worker_process():
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms import environments

    runner = runners.local_runner(PipelineOptions(["--runner", "FnApiRunner"]))
    runner._default_environment = environments.SubprocessSDKEnvironment.from_command_string(
        f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main")  # What Beam sets for multi_processing.
    command = runner._default_environment.command_string
    assert command == runners.worker_command()
    assert command.startswith("exec ") and f"-m {runners.WORKER_MODULE} {os.getpid()}" in command
    runner._default_environment = environments.EmbeddedPythonEnvironment.default()  # in_memory: as Beam sets it.
    assert isinstance(runner._default_environment, environments.EmbeddedPythonEnvironment)


def test_a_worker_dies_with_the_process_that_started_it():
    # The launcher as Beam starts a worker: `sh -c COMMAND` from a thread of its own, then SIGKILL.
    child = ("from beam_pipeline.common.worker_process import die_with_parent; import os, sys, time; "
             "assert die_with_parent(os.getppid()); print('ready', flush=True); time.sleep(300)")
    launcher = ("import subprocess, sys, threading, time, shlex\n"
                f"command = 'exec ' + shlex.quote(sys.executable) + ' -c ' + shlex.quote({child!r})\n"
                "def start():\n"
                "    p = subprocess.Popen(command, shell=True)\n"
                "    print(p.pid, flush=True)\n"
                "    print('exited', p.wait(), flush=True)\n"
                "threading.Thread(target=start).start()\n"
                "time.sleep(300)\n")
    process = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True,
                               env=dict(os.environ))
    try:
        worker = int(process.stdout.readline())
        assert process.stdout.readline().strip() == "ready"  # Not "exited 1": the request was made.
        process.kill()
        process.wait()
        assert _gone(worker), "the worker outlived the process that started it"
    finally:
        process.kill()


def test_ctrl_c_kills_the_workers_first_then_interrupts(tmp_path):
    # A stand-in worker: a process of ours whose command line names the worker module, stuck in a long wait.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", runners.WORKER_MODULE])
    try:
        assert runners.worker_pids() == [worker.pid]
        with pytest.raises(KeyboardInterrupt), runners.workers_stop_on_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)  # Interrupted at once; a bound, never reached.
        assert worker.wait(timeout=30) == -signal.SIGKILL
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Put back.
    finally:
        worker.kill()
        worker.wait()
