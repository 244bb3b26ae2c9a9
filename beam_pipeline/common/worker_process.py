"""A worker process of the local runner that dies with the process that started it.

    exec python -m beam_pipeline.common.worker_process LAUNCHER_PID

Beam's FnApiRunner (`--direct_running_mode=multi_processing`) starts each worker with `sh -c COMMAND`
(`apache_beam/runners/portability/local_job_service.py`, `SubprocessSdkWorker.run`); `runners.local_runner`
makes COMMAND the line above, so the worker replaces the shell and is the launcher's own child. Here it asks
Linux to send it SIGKILL when that parent goes (`prctl(PR_SET_PDEATHSIG)`), then runs Beam's worker main as
`python -m apache_beam.runners.worker.sdk_worker_main` would. Without it, a launcher killed with SIGKILL left
its workers running on (two of them 15-35 s, one holding 3.2 GB, in issue 55's messy run): they noticed only
when their own next call to the runner failed. No Beam or TensorFlow until that request is made; then
`dofn_specs.install()` (Beam's DoFn state search, once per method) and Beam's worker.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

# <linux/prctl.h>
PR_SET_PDEATHSIG = 1
BEAM_WORKER_MAIN = "apache_beam.runners.worker.sdk_worker_main"


def die_with_parent(parent: int) -> bool:
    """Asks for SIGKILL when the parent (pid `parent`) exits; False where the system offers no such request.

    Exits at once when the parent is already gone (the request came too late for its death to send it).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # Reparented already: the launcher died before the request was made.
        os._exit(1)
    return True


def main(argv: list[str]) -> None:
    """`worker_process LAUNCHER_PID`: dies with the launcher, then is Beam's SDK worker."""
    die_with_parent(int(argv[1]))
    from beam_pipeline.common import dofn_specs  # Beam loads here, after the request above.

    dofn_specs.install()  # Each bundle processor the worker builds asks every DoFn method about its state.
    sys.argv = argv[:1]
    runpy.run_module(BEAM_WORKER_MAIN, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
