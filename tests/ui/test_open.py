"""`ui --open` on a machine with no browser (a server, a container, CI) says so, instead of nothing.

A real process: what is on its PATH is the promise. Slow: a UI process of its own (a few seconds)."""

import os
import subprocess
import sys
import threading

import pytest

from scripts.benchmarks.ui_million import generated_run

pytestmark = pytest.mark.slow


def test_open_without_a_browser_says_so_and_serves_anyway(tmp_path):
    run = generated_run(str(tmp_path / "run"), 200)
    empty = tmp_path / "bin"  # No browser on PATH, no display: webbrowser finds nothing to run.
    empty.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("BROWSER", "DISPLAY", "WAYLAND_DISPLAY")} | {"PATH": str(empty)}
    ui = subprocess.Popen([sys.executable, "-m", "beam_pipeline.ui", "--input_dir", run["job"], "--port", "0",
                           "--open"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, ui.kill)  # A UI that never says it ends here, and the test fails.
    watchdog.start()
    try:
        said = []
        for line in ui.stderr:  # Until the notice (or the process ends: then the test fails below).
            said.append(line)
            if "--open" in line:
                break
    finally:
        watchdog.cancel()
        ui.terminate()
        ui.wait(timeout=60)
    assert said and "no browser" in said[-1] and "http://127.0.0.1:" in said[-1], said
