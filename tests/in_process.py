"""A command's `run(argv)` called in this process: what `subprocess.run` gives, without a new interpreter.

A subprocess pays for its interpreter, for TensorFlow's import (3-5 s) and, on Beam's default local
runner, for worker processes that import it again and load the model again. In this process all of
that is paid once per test session. The exit code, stdout and every `error: ...` line come from the
command's own `run(argv)` (the console scripts only add a quiet start-up and `sys.exit`), so a test of
what the command decides and says needs no process of its own.

A test of what only a process shows keeps the real command in a subprocess (`scaleout.run_module`):
signals and kills, two processes at once, a failure inside Beam's worker processes, TensorFlow's
start-up lines kept off stderr, the console scripts, pipes. Every subcommand keeps at least one such test.

Beam runs in memory with one worker (`IN_MEMORY`) unless the arguments choose the runner or its mode:
the same pipeline, the same output bytes (tests/end_to_end/test_reliability.py checks that the output
does not depend on the worker count).
"""

import contextlib
import dataclasses
import importlib
import io
import os
import sys

# `python -m MODULE` -> the module whose run(argv) it calls.
COMMANDS = {
    "beam_pipeline": "beam_pipeline.cli",
    "beam_pipeline.predict": "beam_pipeline.predict.cli",
    "beam_pipeline.search": "beam_pipeline.search.cli",
    "beam_pipeline.quality": "beam_pipeline.quality.cli",
    "beam_pipeline.inspect": "beam_pipeline.preprocess.inspect",
    "beam_pipeline.database": "beam_pipeline.database.server",
    "beam_pipeline.ui": "beam_pipeline.ui.cli",
}
# Commands that run a Beam pipeline (they take Beam's options).
BEAM_COMMANDS = ("beam_pipeline", "beam_pipeline.predict", "beam_pipeline.quality")
IN_MEMORY = ("--direct_num_workers", "1", "--direct_running_mode", "in_memory")
_RUNNER_FLAGS = ("--runner", "--direct_num_workers", "--direct_running_mode")


@dataclasses.dataclass
class Completed:
    """What `subprocess.run(..., capture_output=True, text=True)` returns, for a command run in this process."""

    args: list
    returncode: int
    stdout: str
    stderr: str


def _with_in_memory_runner(module, argv):
    takes_beam_options = module in BEAM_COMMANDS and not (module == "beam_pipeline" and argv and argv[0] in (
        "inspect", "search", "db", "ui"))
    if not takes_beam_options or any(arg.split("=")[0] in _RUNNER_FLAGS for arg in argv):
        return argv
    if any(arg in ("-h", "--help") for arg in argv):
        return argv
    return argv + list(IN_MEMORY)


def run_module(module, *args, timeout=None, in_memory=True, cwd=None):
    """Runs what `python -m module args...` runs, in this process; returns a `Completed`.

    `timeout` is accepted for the same call shape as `scaleout.run_module`, and not enforced: the
    command runs in this thread. `in_memory=False` keeps the runner's defaults (worker processes).
    """
    del timeout
    argv = [os.fspath(arg) if isinstance(arg, os.PathLike) else str(arg) for arg in args]
    if in_memory:
        argv = _with_in_memory_runner(module, argv)
    command = importlib.import_module(COMMANDS[module])

    def call():
        try:
            return command.run(argv)
        except SystemExit as exit_:  # argparse's usage errors, and --help.
            if not isinstance(exit_.code, int | type(None)):
                print(exit_.code, file=sys.stderr)
            return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)

    return _captured([module, *argv], call, cwd)


def _captured(command, call, cwd):
    """`call()`'s exit code with its stdout and stderr captured, run in `cwd` when given: a `Completed`."""
    stdout, stderr = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = call()
    finally:
        os.chdir(previous)
    return Completed(command, code, stdout.getvalue(), stderr.getvalue())


def script(path, *args, cwd=None):
    """Runs what `python path args...` runs (a script of scripts/ with a `main(argv)`, as scripts/train.py), in
    this process: the script's module loaded afresh, its `main(argv)` called; a `Completed`."""
    import importlib.util

    argv = [os.fspath(arg) if isinstance(arg, os.PathLike) else str(arg) for arg in args]
    spec = importlib.util.spec_from_file_location(f"script_{os.path.basename(path).split('.')[0]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _captured([os.fspath(path), *argv], lambda: module.main(argv), cwd)


def predict(*args, **kwargs):
    """The predict job's command line, in this process."""
    return run_module("beam_pipeline.predict", *args, **kwargs)


def search(*args, **kwargs):
    """The search command line, in this process."""
    return run_module("beam_pipeline.search", *args, **kwargs)


def ui_start(*flags, timeout=120):
    """The UI's command line in this process, for a start-up that must refuse: a `Completed`.

    It runs in a thread: a UI that starts serving instead of refusing would never return, so after
    `timeout` seconds the test fails (the server is left to the thread, which ends with the session).
    """
    import threading

    done = {}
    thread = threading.Thread(target=lambda: done.update(result=run_module("beam_pipeline.ui", *flags)),
                              daemon=True)
    thread.start()
    thread.join(timeout)
    assert "result" in done, f"the UI did not refuse to start within {timeout} s: {flags}"
    return done["result"]
