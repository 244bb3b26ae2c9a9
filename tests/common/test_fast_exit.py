"""A command or worker process ends without CPython's last full collection over what it imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from beam_pipeline.common import fast_exit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Garbage in a reference cycle with a finalizer: only a cyclic collection finds it, and its finalizer says so.
# The automatic collections are off, so the only collection left is the interpreter's own at exit.
PROBE = """
import gc, sys
gc.disable()
class Cycle:
    def __del__(self):
        sys.stdout.write("collected\\n"); sys.stdout.flush()
first, second = Cycle(), Cycle()
first.other, second.other = second, first
del first, second
{call}
"""


def _exit_output(call: str) -> str:
    return subprocess.run([sys.executable, "-c", PROBE.format(call=call)], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, check=True).stdout


def test_a_process_that_skips_its_final_collection_leaves_its_garbage_to_the_os():
    assert _exit_output("") == "collected\ncollected\n"  # The probe sees the exit's collection when it runs.
    assert _exit_output("from beam_pipeline.common.fast_exit import skip_final_collection; "
                        "skip_final_collection(); skip_final_collection()") == ""


@pytest.fixture
def registrations(monkeypatch):
    calls = []
    monkeypatch.setattr(fast_exit, "skip_final_collection", lambda: calls.append(True))
    return calls


def test_the_quality_jobs_worker_steps_skip_it_in_their_worker_process(registrations):
    from beam_pipeline.quality.pipeline import ReadHashes
    from beam_pipeline.quality.signal_shards import ComputeShardSignals

    ComputeShardSignals("/tmp/unused", {}).setup()
    ReadHashes(4.0).setup()
    assert len(registrations) == 2


def test_every_command_skips_it(registrations, monkeypatch):
    from beam_pipeline.common import launcher, quiet

    monkeypatch.setattr(quiet, "quiet_startup", lambda argv: None)
    with pytest.raises(SystemExit) as exited:
        launcher.console_main(lambda: 3)
    assert exited.value.code == 3 and registrations == [True]
