"""A session fixture's output built once per test run, not once per pytest-xdist worker.

    def tiny_job(tmp_path_factory):
        return built_once(tmp_path_factory, "tiny_job", build)   # build(folder) -> JSON-able result

Each xdist worker is a process of its own with its own session fixtures: a shared run that both workers
read (tiny_job, tiny_raw_job, columns_job: 15-28 s of CPU each, measured in docs/testing.md) was made twice,
once by each. Here the first worker to ask builds it in a folder both see (the session's base temporary
folder), under an exclusive lock; the other waits on the lock and reads the result the builder recorded.
A build that fails records nothing, so the next asker builds again (and fails with its own traceback).

The outputs are read-only for the tests (docs/testing.md), so two processes reading one folder is what
two workers reading their own copies was. Without xdist it is the same fixture in one process.
"""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any


def shared_root(tmp_path_factory: Any) -> pathlib.Path:
    """The folder every worker of this test run sees: the parent of a worker's own base folder under xdist."""
    base = pathlib.Path(tmp_path_factory.getbasetemp())
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: Any, name: str, build: Callable[[pathlib.Path], Any]) -> Any:
    """`build(folder)`'s result (JSON: lists come back as lists), run once for this test run in
    `shared_root()/name`, whichever worker asks first."""
    root = shared_root(tmp_path_factory)
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # Released when the file closes, also when the build raises.
        done = root / f"{name}.built.json"  # Beside the folder: tests list what is inside it.
        if done.exists():
            return json.loads(done.read_text())
        if folder.exists():  # A build that failed part way: start clean.
            import shutil
            shutil.rmtree(folder)
        folder.mkdir()
        result = build(folder)
        done.write_text(json.dumps(result))
        return json.loads(done.read_text())  # The same shape as the other workers get.
