"""Quiet by default: TensorFlow's start-up lines never reach the user's terminal.

TensorFlow 2.21 writes them from C++ through absl before its logging is set up,
so TF_CPP_MIN_LOG_LEVEL no longer stops them (measured: 4-6 lines per process:
oneDNN, cudart_stub, cpu_feature_guard, and absl's "before InitializeLog"). They
are written while `tensorflow` (and `tensorflow_transform`) are imported, so
`quiet_startup` filters exactly those imports: an import hook points file
descriptor 2 at a pipe for the import's duration, then writes what the import
printed, minus those lines, back to the real stderr. Outside an import nothing
stands between the program and its stderr: no line is delayed, reordered, or
lost when the process dies. Beam's worker processes print theirs while the run's
log captures their stderr (`run_errors.RunLog.capture`), so they never reach
the terminal either.

TF_CPP_MIN_LOG_LEVEL=3 also keeps TensorFlow's C++ INFO, WARNING and ERROR log
lines away (as before); TensorFlow raises real errors as Python exceptions.
`--verbose` (or BEAM_IMAGE_PIPELINE_VERBOSE=1) leaves everything as TensorFlow
does it. Only command-line entry points call `quiet_startup`: in-process callers
(tests, notebooks) keep their own stderr.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
import types
from collections.abc import Iterator, Sequence

VERBOSE_ENV = "BEAM_IMAGE_PIPELINE_VERBOSE"
# The imports that print start-up lines (tensorflow_transform's pulls in TensorFlow's CPU feature check).
NOISY_IMPORTS = ("tensorflow", "tensorflow_transform")
STARTUP_LINE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:.]+ +\d+ (port|cudart_stub|cpu_feature_guard|cuda_executor|cuda_dnn|cuda_fft|cuda_blas)"
    rb"\.cc:\d+\] "
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.$)")
_installed = False


def is_startup_line(line: bytes) -> bool:
    """Whether a stderr line is one of TensorFlow's start-up notices."""
    return STARTUP_LINE.match(line) is not None


def wants_verbose(argv: Sequence[str]) -> bool:
    """Whether the command line asks for --verbose (spelt in full: the commands take no abbreviations)."""
    return "--verbose" in argv or os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def quiet_startup(argv: Sequence[str]) -> None:
    """Keeps TensorFlow's start-up lines off stderr from here on, unless `argv` asks for --verbose.

    Call it before TensorFlow is first imported.
    """
    global _installed
    if _installed or wants_verbose(argv):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.meta_path.insert(0, _QuietImports())
    _installed = True


@contextlib.contextmanager
def startup_lines_filtered() -> Iterator[None]:
    """While it runs, descriptor 2 is a pipe; at its end what came through, minus start-up lines, goes to stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield  # No stderr to filter.
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_end, chunks), name="tf-import-stderr", daemon=True)
    reader.start()  # Reads while the import writes: a pipe holds only 64 KiB.
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 2)  # Closes the pipe's last write end: the reader sees its end.
        os.close(saved)
        reader.join()
        kept = b"".join(line for line in b"".join(chunks).splitlines(keepends=True)
                        if not is_startup_line(line.rstrip(b"\r\n")))
        _write_all(2, kept)


def _read_all(fd: int, chunks: list[bytes]) -> None:
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(1 << 16):
            chunks.append(chunk)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass  # stderr went away: nothing left to tell.


class _QuietImports(importlib.abc.MetaPathFinder):
    """Finds NOISY_IMPORTS as the other finders would, and runs their import under `startup_lines_filtered`."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in NOISY_IMPORTS or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _FilteredLoader(spec.loader)
        return spec


class _FilteredLoader(importlib.abc.Loader):
    """A loader running another loader's `exec_module` with start-up lines filtered."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        with startup_lines_filtered():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> object:  # get_resource_reader, is_package, ... of the real loader.
        return getattr(self._loader, name)
