"""A worker's Python steps run in a child process of its own: a step that hangs is stopped, one that ends
its process is named, and what a step prints never reaches the command's stdout.

    process = StepProcess(records, timeout=60.0)
    outcome = process.call(position, pixels)   # Ran | Raised | BadOutput | TimedOut; StepCrashed if it died
    process.close()

Why a process: a Python thread cannot be stopped, so a step stuck on one image
(an endless loop, a C library waiting forever) would stall its shard for good.
The child runs the steps' set-up once, then one image at a time; on a timeout
it is killed (SIGKILL) and a fresh one started (set-up again) for the next
image. The child's stdout is the parent's stderr (the run's log while a run
captures it), so a step's `print` cannot corrupt a command's output; requests
and answers go over a pair of pipes of their own, and the pixels through a
file both map (`_Pixels`): through a pipe a 500x375 image took ~7 ms a round
trip on a busy 2-core machine (64 KiB a wake-up), through the mapping two
copies and two small messages. The child ends when its parent does (a
watchdog thread), so a killed worker leaves no stuck step behind.

`sys.exit` in a step ends the child as `os._exit` or a segfault do: the step
asked its process to end, which is never one row's failure. The call raises
`StepCrashed` (its text starts with `CRASH_MARK`), which fails the run: one
line naming the step (`crash_line`), the finished shards kept for a resume.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from tf_serving_input import steps as image_steps

# Starts the text of a StepCrashed, so that the launcher finds it in a failure a runner relays as text.
CRASH_MARK = "step_crashed:"
# --step_timeout's default, in seconds: far above any per-image step worth running at scale, short enough that a
# stuck image costs a minute, not the run. 0 runs the Python steps in the worker itself (no timeout, no guard).
DEFAULT_TIMEOUT = 60.0
_MODULE = "beam_pipeline.preprocess.step_process"
_WATCH_SECONDS = 1.0  # How often the child checks that its parent is alive.
_CLOSE_SECONDS = 2.0  # How long a closed child may take to end before it is killed.


@dataclasses.dataclass(frozen=True)
class Ran:
    """The step's image (NumPy uint8 [h, w, 3], checked; from the child: its shape, the pixels in `_Pixels`)."""

    image: Any
    seconds: float


class _Pixels:
    """Images between the worker and its step process: a file both map, grown (never shrunk) to the largest."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._map: mmap.mmap | None = None
        self._size = 0

    def _mapped(self, size: int) -> mmap.mmap:
        if self._map is None or size > self._size:
            # One side at a time grows it (requests and answers alternate); never shrunk.
            current = os.fstat(self.fd).st_size
            if current < max(size, mmap.PAGESIZE):
                current = max(size, mmap.PAGESIZE)
                os.ftruncate(self.fd, current)
            # The old mapping is dropped, not closed: a step may still hold a view of an earlier image.
            self._size, self._map = current, mmap.mmap(self.fd, current)
        return self._map

    def put(self, image: Any) -> tuple[int, ...]:
        """Copies a uint8 image in; returns its shape (what the message carries)."""
        import numpy as np

        view = np.frombuffer(self._mapped(max(image.nbytes, 1)), np.uint8, image.size).reshape(image.shape)
        view[...] = image
        return tuple(image.shape)

    def view(self, shape: tuple[int, ...]) -> Any:
        """The image of `shape` now in the file, as a view (read-only for the step: `get` copies)."""
        import numpy as np

        size = int(np.prod(shape))
        return np.frombuffer(self._mapped(max(size, 1)), np.uint8, size).reshape(shape)

    def get(self, shape: tuple[int, ...]) -> Any:
        return self.view(shape).copy()


@dataclasses.dataclass(frozen=True)
class Raised:
    """The step raised: its one line (`steps.error_line`), its traceback and its seconds."""

    line: str
    traceback: str
    seconds: float


@dataclasses.dataclass(frozen=True)
class BadOutput:
    """The step returned something that is not an image: what came back (`steps.python_output_problem`)."""

    problem: str
    seconds: float


@dataclasses.dataclass(frozen=True)
class TimedOut:
    """The step ran past the timeout; its process was killed and is replaced for the next image."""

    seconds: float


class StepCrashed(RuntimeError):
    """A step ended the process it ran in (`os._exit`, `sys.exit`, a signal such as SIGSEGV), or its set-up
    failed or never finished: no row of the worker can run, so the run fails, naming the step."""


def setup_bound(timeout: float | None) -> float | None:
    """Seconds the steps' set-up may take in a step process: ten images' worth of --step_timeout (a set-up
    loads a model or a cascade once; one that hangs must not stall the run); None without a timeout."""
    return None if timeout is None else 10 * timeout


def crash_line(text: str) -> str | None:
    """The one line of a StepCrashed found in a failure's text (a runner relays a worker's error as text)."""
    for line in text.splitlines():
        found = line.find(CRASH_MARK)
        if found >= 0:
            return line[found + len(CRASH_MARK):].strip().rstrip("]'\"")
    return None


def run_step(name: str, call: Any, pixels: Any, max_pixels: int | None = None) -> Ran | Raised | BadOutput:
    """One step on one read-only image, timed; an exception is the row's (Raised), never raised on; an output of
    more than `max_pixels` pixels is a BadOutput."""
    import numpy as np

    started = time.perf_counter()
    try:
        out = call(pixels)
    except Exception as error:  # noqa: BLE001 - the step's failure is the row's. SystemExit is not caught.
        return Raised(f"{name}: {image_steps.error_line(error)}", "".join(traceback.format_exception(error)),
                      time.perf_counter() - started)
    seconds = time.perf_counter() - started
    problem = image_steps.python_output_problem(name, out, max_pixels)
    if problem is not None:
        return BadOutput(problem, seconds)
    return Ran(np.ascontiguousarray(out), seconds)


def _how_it_ended(returncode: int | None) -> str:
    if returncode is None:
        return "it stopped answering"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}: os._exit or sys.exit in the step?" if returncode else \
        "exit status 0: sys.exit() or os._exit(0) in the step?"


class StepProcess:
    """The Python steps of one worker, run in a child process; `timeout` seconds an image (None: no limit)."""

    def __init__(self, records: list[image_steps.StepRecord], timeout: float | None,
                 max_pixels: int | None = None) -> None:
        self._records = list(records)
        self._timeout = timeout
        self._max_pixels = max_pixels  # A larger output is a step_bad_output row (steps.python_output_problem).
        self._child: subprocess.Popen[bytes] | None = None
        self._requests: Connection | None = None
        self._answers: Connection | None = None
        self._pixels: _Pixels | None = None
        self.starts = 0  # Children started: 1, plus one a timeout.

    def start(self) -> None:
        """Starts the child and runs the steps' set-up there; RuntimeError when the set-up fails."""
        child_read, parent_write = os.pipe()
        parent_read, child_write = os.pipe()
        if self._pixels is None:
            shared = tempfile.TemporaryFile(prefix="beam-image-pipeline-step-")  # Unlinked: gone with the fds.
            self._pixels = _Pixels(os.dup(shared.fileno()))
            shared.close()
        try:
            # stdout=2: what a step prints goes where this process's stderr goes (the run's log during a run).
            self._child = subprocess.Popen(
                [sys.executable, "-m", _MODULE, str(child_read), str(child_write), str(self._pixels.fd)],
                pass_fds=(child_read, child_write, self._pixels.fd), stdin=subprocess.DEVNULL, stdout=2,
                close_fds=True)
        finally:
            os.close(child_read)
            os.close(child_write)
        self.starts += 1
        self._requests, self._answers = Connection(parent_write, readable=False), Connection(parent_read,
                                                                                             writable=False)
        # The records themselves: a file step's carried bytes go with them (the child never reads the path).
        self._requests.send((list(sys.path), self._records, self._max_pixels))
        bound = setup_bound(self._timeout)
        try:
            if bound is not None and not self._answers.poll(bound):
                self._kill()
                named = ", ".join(record.spec for record in self._records)
                raise StepCrashed(f"{CRASH_MARK} the set-up of --image_step {named} did not finish within "
                                  f"{bound:g} s (10 x --step_timeout)")
            ready = self._answers.recv()
        except (EOFError, OSError):
            raise self._crashed(None, "while loading the steps") from None
        if ready is not None:
            self.close()
            raise StepCrashed(f"{CRASH_MARK} {ready}")  # The run's one line names the step and why.

    def call(self, position: int, pixels: Any) -> Ran | Raised | BadOutput | TimedOut:
        """Runs the Python step at `position` (of the records given) on one image."""
        if self._child is None:
            self.start()
        assert self._requests is not None and self._answers is not None and self._pixels is not None
        started = time.perf_counter()
        try:
            self._requests.send((position, self._pixels.put(pixels)))
            if self._timeout is not None and not self._answers.poll(self._timeout):
                self._kill()
                return TimedOut(time.perf_counter() - started)
            answer: Ran | Raised | BadOutput = self._answers.recv()
        except (EOFError, OSError):
            raise self._crashed(position, "on an image") from None
        if isinstance(answer, Ran):  # The child wrote its image where the request's was.
            return Ran(self._pixels.get(answer.image), answer.seconds)
        return answer

    def _crashed(self, position: int | None, when: str) -> StepCrashed:
        returncode = None
        if self._child is not None:
            try:
                returncode = self._child.wait(_CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        records = self._records if position is None else [self._records[position]]
        named = ", ".join(record.spec for record in records)
        return StepCrashed(f"{CRASH_MARK} --image_step {named} ended the process it runs in {when} "
                           f"({_how_it_ended(returncode)})")

    def _kill(self) -> None:
        for connection in (self._requests, self._answers):
            if connection is not None:
                connection.close()
        self._requests = self._answers = None
        if self._child is not None:
            if self._child.poll() is None:
                self._child.kill()
            self._child.wait()
            self._child = None

    def close(self) -> None:
        """Ends the child: its requests' pipe closes, it exits; killed if it has not within 2 s."""
        if self._requests is not None:
            self._requests.close()
            self._requests = None
        if self._child is not None:
            try:
                self._child.wait(_CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if self._pixels is not None:
            os.close(self._pixels.fd)
            self._pixels = None


def _shares(image: Any, pixels: Any) -> bool:
    import numpy as np

    return bool(np.may_share_memory(image, pixels))


def _watch_parent(parent: int) -> None:
    """Ends this process when its parent is gone (a killed worker must leave no step running)."""
    while True:
        time.sleep(_WATCH_SECONDS)
        if os.getppid() != parent:
            os._exit(0)


def _serve(read_fd: int, write_fd: int, pixels_fd: int) -> None:
    """The child: set up the steps, then answer one image at a time until the requests' pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it ends this process.
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    requests, answers = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    shared = _Pixels(pixels_fd)
    path, records, max_pixels = requests.recv()
    sys.path[:] = path  # The parent's: a package.module step imports here as it did there.
    try:
        callers = [(record.name, image_steps.python_caller(record, image_steps.load(record))) for record in records]
    except Exception as error:  # noqa: BLE001 - the parent raises it, as the set-up in the worker would.
        answers.send(str(error))
        return
    answers.send(None)
    while True:
        try:
            position, shape = requests.recv()
        except EOFError:
            return
        pixels = shared.view(shape)
        pixels.flags.writeable = False  # The step may not change the image in place; it returns its own.
        name, call = callers[position]
        outcome = run_step(name, call, pixels, max_pixels)
        if isinstance(outcome, Ran):  # Its image goes back where the request's was (it may be that very view).
            outcome = Ran(shared.put(outcome.image.copy() if _shares(outcome.image, pixels) else outcome.image),
                          outcome.seconds)
        answers.send(outcome)


if __name__ == "__main__":
    # Through the module's real name: what the child pickles (Ran, ...) must unpickle in the parent.
    from beam_pipeline.preprocess import step_process

    step_process._serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
