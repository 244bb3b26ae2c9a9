"""Quiet by default: TensorFlow's start-up lines never reach the user's terminal.

TensorFlow 2.21 writes them from C++ through absl before its logging is set up,
so TF_CPP_MIN_LOG_LEVEL no longer stops them (measured: 4-6 lines per process:
oneDNN, cudart_stub, cpu_feature_guard, and absl's "before InitializeLog"). They
are dropped where they are written: file descriptor 2 becomes a pipe that a
thread copies to the real stderr, leaving those lines out. Beam's worker
processes inherit descriptor 2, so their start-up lines go the same way.
Everything else passes unchanged. `--verbose` (or BEAM_IMAGE_PIPELINE_VERBOSE=1)
lets them through.

Only command-line entry points call `quiet_startup`: in-process callers (tests,
notebooks) keep their own stderr.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

VERBOSE_ENV = "BEAM_IMAGE_PIPELINE_VERBOSE"
STARTUP_LINE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_executor|cuda_dnn|cuda_fft|cuda_blas)"
    rb"\.cc:\d+\] "
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.$)")
_installed = False


def is_startup_line(line: bytes) -> bool:
    """Whether a stderr line is one of TensorFlow's start-up notices."""
    return STARTUP_LINE.match(line) is not None


def quiet_startup(argv: list[str]) -> None:
    """Hides TensorFlow's start-up lines from here on, in this process and its children, unless asked not to.

    Call it before TensorFlow is first imported. `argv` is checked for --verbose.
    """
    global _installed
    if _installed or "--verbose" in argv or os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's Python-side logging.
    try:
        original = os.dup(2)
    except OSError:
        return  # No stderr to filter.
    read_end, write_end = os.pipe()
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    forwarder = threading.Thread(target=_forward, args=(read_end, original), name="stderr-filter", daemon=True)
    forwarder.start()
    atexit.register(_restore, original, forwarder)
    _installed = True


def _forward(read_end: int, original: int) -> None:
    pending = b""
    while True:
        try:
            chunk = os.read(read_end, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not is_startup_line(line))
        if kept:
            _write_all(original, kept)
    if pending and not is_startup_line(pending):
        _write_all(original, pending)
    os.close(read_end)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # The terminal went away: nothing left to tell.


def _restore(original: int, forwarder: threading.Thread) -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(original, 2)  # Closes this process's end of the pipe: the forwarder reads to the end.
    forwarder.join(timeout=5)  # Longer only if a child still holds the pipe.
