"""Runner set-up shared by the jobs: the local FnApiRunner with the job's options, workers that stop with
the launcher, and quiet logs."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from beam_pipeline.common.flags import DEFAULT_RUNNER, flag_value

if TYPE_CHECKING:
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner


def local_runner(pipeline_options: PipelineOptions) -> FnApiRunner | None:
    """The FnApiRunner, set up to hand the pipeline options to its worker processes; None otherwise.

    Beam's FnApiRunner starts its multi_processing workers with empty pipeline
    options, so Beam's filesystems there would not see --s3_endpoint_url, S3
    credentials and the like: workers could not read the images. This gives
    them the options, as a portable job service does.
    """
    if pipeline_options.view_as(StandardOptions).runner != DEFAULT_RUNNER:
        return None
    # One TensorFlow thread per worker process, as there is one worker per core. A DoFn's setup
    # asks for that too, but only takes effect where nothing has started TF's runtime yet; a worker
    # that had (measured: one of two) ran with default pools, oversubscribing the cores. TF reads
    # these variables when its runtime starts; the workers inherit them.
    # Only for worker processes: in-process modes keep TF's default pools.
    if pipeline_options.view_as(DirectOptions).direct_running_mode == "multi_processing":
        for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            os.environ.setdefault(variable, "1")
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(
        pipeline_options.get_all_options(retain_unknown_options=True))
    runner: FnApiRunner = _runner_class()(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(retrieval_token="unused-retrieval-token",
                                             pipeline_options=encoded)))
    return runner


# The module each local worker process runs (its command line names it: `worker_pids` finds them by it).
WORKER_MODULE = "beam_pipeline.common.worker_process"


def worker_command() -> str:
    """The shell command the local runner starts a worker process with: Beam's own worker main, run by
    `worker_process` so that it dies with this process; `exec`, so that it is this process's child, not
    a shell's (dash here kept the shell between them)."""
    return f"exec {shlex.quote(sys.executable)} -m {WORKER_MODULE} {os.getpid()}"


@functools.cache
def _runner_class() -> type[FnApiRunner]:
    """Beam's FnApiRunner, starting its worker processes with `worker_command` instead of Beam's own line.

    FnApiRunner.run_pipeline sets its environment from --direct_running_mode just before it runs
    (`python -m apache_beam.runners.worker.sdk_worker_main` for multi_processing): the worker
    environment is swapped for ours as it is set, and every other mode is left as Beam sets it.
    """
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.transforms import environments

    class LocalRunner(fn_runner.FnApiRunner):
        @property
        def _default_environment(self) -> Any:
            return self._environment

        @_default_environment.setter
        def _default_environment(self, environment: Any) -> None:
            if isinstance(environment, environments.SubprocessSDKEnvironment):
                environment = environments.SubprocessSDKEnvironment.from_command_string(worker_command())
            self._environment = environment

    return LocalRunner


def worker_pids(parent: int | None = None) -> list[int]:
    """The local runner's worker processes that `parent` (default: this process) started; [] off Linux."""
    parent = os.getpid() if parent is None else parent
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            if int(stat.rsplit(b")", 1)[1].split()[1]) != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if WORKER_MODULE.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue  # Gone meanwhile, or not ours to read.
    return found


def stop_workers() -> list[int]:
    """Kills this process's local worker processes (SIGKILL); returns their pids.

    Their temporary files are what a killed run leaves anyway: the next run of the same
    command deletes them and resumes.
    """
    stopped = []
    for pid in worker_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
    return stopped


@contextlib.contextmanager
def workers_stop_on_interrupt() -> Iterator[None]:
    """While a pipeline runs: Ctrl-C (SIGINT) kills the worker processes first, then interrupts as before.

    Without it, Beam's runner waited on Ctrl-C for each worker to finish what it held: a worker
    waiting on a stalled URL (3 attempts of --url_read_timeout) kept the command 30 s, 25.5 s in issue
    55. Only the main thread can set a handler: elsewhere (a notebook's thread) nothing changes.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield  # Ctrl-C ignored (`nohup`, a background job), or not ours to handle: as it was.
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        stop_workers()
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL: the process would end; the launcher's way to end is KeyboardInterrupt (exit 130).
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def for_io_bound_work(beam_args: list[str]) -> list[str]:
    """Beam arguments for a pipeline that mostly waits (e.g. on a database): on the local runner,
    worker threads instead of worker processes, which would each start (and import TensorFlow) for
    a few seconds of waiting; other runners are left as they are."""
    if flag_value(beam_args, "runner") != DEFAULT_RUNNER:
        return list(beam_args)
    kept = list(beam_args)
    while "--direct_running_mode" in kept:  # The flag given as two arguments: drop its value too.
        at = kept.index("--direct_running_mode")
        del kept[at:at + 2]
    kept = [arg for arg in kept if not arg.startswith("--direct_running_mode=")]
    return kept + ["--direct_running_mode=multi_threading"]


def quiet_library_logs() -> None:
    """Keeps Beam's relayed worker notices and TFT's advice out of the user's terminal."""
    for name in ("apache_beam.runners.portability", "apache_beam.runners.worker", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def configure_tensorflow_threads() -> None:
    """One TF thread per worker process: Beam already runs one worker per core."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TF already started in this process (in-process runners, tests): keep its pools.
