"""A process that is about to end skips its final garbage collection of everything it imported.

At exit, CPython runs a full cyclic collection over every object still alive: with TensorFlow and Beam
imported that is ~10^6 objects and ~0.7-1 s a process, spent on memory the OS takes back anyway. Beam's
local runner waits for each worker process to exit before a pipeline returns, so every pipeline paid it
once more per worker, and every command once more at its own end. `gc.freeze()` in an exit handler moves
what is alive to the permanent generation, which that collection skips. Nothing else changes: the other
exit handlers still run, files are still flushed and closed (every output is complete and renamed before
its command returns, and the run lock is released by its context manager before the exit).
A worker step registers it in whatever process runs it: with an in-process runner that is the caller's own
(a test, a notebook), which then skips that collection too, harmlessly.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def skip_final_collection() -> None:
    """Registers (once a process) the exit handler that freezes what is alive before CPython's last collection."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
