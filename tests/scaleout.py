"""Helpers for the scale-out tests: a tiny dataset, running the CLI, comparing two outputs.

The job's outputs are deterministic by design (byte-identical shards, same keys in
the same shards, bit-identical statistics), so a run on another runner or
filesystem must produce exactly what the default local runner produces.

The process and port helpers (`bound_socket`, `accepts_connections`, `spawn_in_session`,
`signal_group`) need only the standard library: `flink_cluster.py`, a command line run many
times by scripts, uses them, so NumPy, Pillow and TensorFlow are imported only by the helpers
that make or compare data.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

MISSING = "images/missing.jpg"
# Flink keeps a job's SDK workers between its stages instead of starting fresh ones (each imports TensorFlow) for
# each stage: without it the small job started 7 workers one after another on embedded Flink, ~7 a TaskManager on
# the standing cluster. Beam honours it where its runner's classes come from Flink's own classpath: the job server's
# JVM (embedded), the standing cluster's TaskManagers (flink_cluster.py's KEEPS_SDK_WORKERS). scripts/run_flink.sh
# gives it by default.
FLINK_ENVIRONMENT_CACHE = "--environment_cache_millis=60000"


def make_small_dataset(folder, count=12, size=32):
    """`count` small JPEG/PNG images in 2 classes, train and validation, plus one missing file.

    Returns (csv path, rows); paths in the CSV are relative to its folder.
    """
    import numpy as np

    import imaging

    rng = np.random.default_rng(11)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        label = "ab"[i % 2]
        image = imaging.quadrants(size, size)
        image[..., i % 3] = rng.integers(0, 256)
        fmt, ext = [("JPEG", "jpg"), ("PNG", "png")][i % 2]
        name = f"images/{label}_{i}.{ext}"
        (folder / name).write_bytes(imaging.encode(image, fmt))
        rows.append([name, label, "validation" if i % 4 == 0 else "train"])
    rows.append([MISSING, "a", "train"])
    imaging.write_csv(folder / "images.csv", ["path", "label", "split"], rows)
    (folder / "small_steps.py").write_text(SMALL_PYTHON_STEP)
    return folder / "images.csv", rows


# The small dataset's own steps: a Python step with a per-worker set-up, written beside its CSV, then the
# documented TF step. Every runner's run of it applies them (the step file's bytes travel with the job:
# a remote worker never reads the launcher's file) and must store what the local run stores.
SMALL_PYTHON_STEP = """\
import numpy as np

from beam_pipeline import python_step


def levels():
    return (255 - np.arange(256) // 2).astype(np.uint8)


@python_step(setup=levels)
def fold(image, table):
    return table[image]
"""


def small_step_flags(folder):
    """The --image_step flags of the small dataset's runs (paths relative to `folder`, the runs' cwd)."""
    gray_world = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_data", "steps",
                              "gray_world.py")
    return ("--image_step", "small_steps.py:fold", "--image_step", f"{os.path.relpath(gray_world, folder)}:gray_world")


def job_command(csv_path, out, *extra):
    """The real command line of the job on a small dataset (16 px, one bad row tolerated)."""
    return [sys.executable, "-m", "beam_pipeline", "--input_csv", str(csv_path), "--output_dir", str(out),
            "--image_size", "16", "--max_error_rate", "0.2", "--no_progress", *extra]


def run_module(module, *args, timeout=600):
    """Runs `python -m module args...` in a subprocess (text output, TensorFlow's C++ logs quiet)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def predict(*args, **kwargs):
    """Runs the predict job's command line."""
    return run_module("beam_pipeline.predict", *args, **kwargs)


def run_job(csv_path, out, *extra, env=None, cwd=None, python=None, timeout=600):
    """Runs the job in a subprocess; returns the CompletedProcess (text output)."""
    command = job_command(csv_path, out, *extra)
    if python:
        command[0] = str(python)
    run_env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(command, capture_output=True, text=True, env=run_env, cwd=cwd, timeout=timeout)


def bound_socket(host: str, port: int = 0) -> socket.socket:
    """A TCP socket bound to (host, port), not listening: the port stays taken while it is open.

    Port 0 lets the kernel choose a free one (read it back with `getsockname()`). Raises OSError
    where the port is taken. No SO_REUSEADDR: a port some socket still holds counts as taken.
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        raise
    return s


def free_port():
    """A TCP port on localhost that was free a moment ago."""
    with bound_socket("localhost") as s:
        return s.getsockname()[1]


def accepts_connections(host: str, port: int, timeout: float = 1) -> bool:
    """Whether something accepts TCP connections at (host, port) now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def spawn_in_session(command: Sequence[str], log_path: str | os.PathLike, env: Mapping[str, str] | None = None,
                     cwd: str | os.PathLike | None = None) -> subprocess.Popen:
    """Starts `command` in a session (and process group) of its own, stdout and stderr to `log_path`.

    Its own group, so that it and whatever it starts can be signalled together (`signal_group`);
    its own session, so that a terminal's Ctrl-C reaches only the process that started it. Stdin
    is /dev/null: a server never reads it, and one started from a script must not hold the script's.
    """
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)


def signal_group(pid: int, sig: int) -> None:
    """Sends `sig` to process group `pid`; a group that is gone (or not ours to signal) is no error."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start_server(command, port, log_path, env=None, cwd=None, timeout=120):
    """Starts `command` in its own process group; returns the Popen once `port` accepts connections.

    Its output goes to `log_path` (shown when it fails to start). Stop it with `stop_server`.
    """
    process = spawn_in_session(command, log_path, env=env, cwd=cwd)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if accepts_connections("localhost", port):
            return process
        time.sleep(0.2)
    stop_server(process)
    with open(log_path, "rb") as f:
        output = f.read().decode("utf-8", "replace")[-3000:]
    raise RuntimeError(f"{' '.join(map(str, command))} did not listen on port {port} "
                       f"(exit code {process.returncode}):\n{output}")


def stop_server(process):
    """Stops a server started by `start_server`, with every process it started (its process group)."""
    if process.poll() is None:
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    # Children (e.g. SDK workers of a worker pool) may outlive their parent.
    signal_group(process.pid, signal.SIGKILL)
    process.wait()


def assert_small_dataset_run_matches(local_out, other_out, rows, runner):
    """A run of `make_small_dataset` on `runner` wrote what the local run wrote, missing file failed."""
    import outputs

    written = outputs.manifest(other_out)
    assert written["runner"] == runner
    # Through the small dataset's steps (small_step_flags), as the local run: a Python step, then a TF step.
    assert [step["kind"] for step in written["config"]["image_steps"]] == ["python", "tf"]
    assert (written["rows"], written["written"], written["failed"]) == (len(rows), len(rows) - 1, 1)
    assert [e["source"] for e in outputs.errors(other_out)] == [MISSING]
    outputs.assert_same_output(local_out, other_out)


def start_job(csv_path, out, *extra, env=None, cwd=None):
    """Starts the job in its own process group, its output kept in temporary files; see `finish_job`.

    For runners whose launcher starts helper processes (e.g. the FlinkRunner's Java job server),
    which a plain timeout would leave running, and for tests that act while the job runs.
    """
    return start_command(job_command(csv_path, out, *extra), env=env, cwd=cwd)


def start_command(command, env=None, cwd=None):
    """Starts a command line as `start_job` starts the job."""
    run_env = dict(os.environ if env is None else env, TF_CPP_MIN_LOG_LEVEL="3")
    stdout, stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, stdout=stdout, stderr=stderr, text=True, env=run_env, cwd=cwd,
                               start_new_session=True)
    process.outputs = (stdout, stderr)
    return process


def finish_job(process, timeout=600):
    """Waits for a job from `start_job`; returns the CompletedProcess (text output).

    The job's whole process group is killed at `timeout`, which raises AssertionError with the
    end of the job's output (a stuck job fails the test instead of blocking it), and when the
    job ends (helpers that outlived it would hold ports and CPU).
    """
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    signal_group(process.pid, signal.SIGKILL)
    process.wait()
    texts = []
    for f in process.outputs:
        f.seek(0)
        texts.append(f.read())
        f.close()
    stdout, stderr = texts
    if timed_out:
        raise AssertionError(f"the job did not finish within {timeout} s and was killed:\n"
                             f"{stdout[-2000:]}{stderr[-6000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_job_killing_group(csv_path, out, *extra, env=None, cwd=None, timeout=600):
    """Like `run_job`, but the job runs in its own process group, all of it killed at `timeout`
    and when the job ends (see `start_job` and `finish_job`)."""
    return finish_job(start_job(csv_path, out, *extra, env=env, cwd=cwd), timeout)


def export_small_model(job_out, export_dir, size=16, seed=5, images_after_steps=False):
    """A tiny classifier (random weights: only how it predicts matters) exported on a job's output."""
    import keras

    from tf_serving_input import export_serving_model

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((size, size, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2, activation="softmax")])
    return export_serving_model(model, str(job_out), str(export_dir), images_after_steps=images_after_steps)


def predict_command(model_dir, input_dir, out, *extra):
    """The real command line of the predict job (Parquet only unless `extra` names a database)."""
    return [sys.executable, "-m", "beam_pipeline.predict", "--model_dir", str(model_dir), "--input_dir",
            str(input_dir), "--output_dir", str(out), "--database", "none", "--no_progress", *extra]


def run_predict_killing_group(model_dir, input_dir, out, *extra, env=None, cwd=None, timeout=600):
    """The predict job, run like `run_job_killing_group`."""
    return finish_job(start_command(predict_command(model_dir, input_dir, out, *extra), env=env, cwd=cwd), timeout)


class ScriptedCluster:
    """A standing cluster that a scripts/*_cluster.sh started in `folder` (the scale-out tests' Flink and Spark
    clusters): its script's subcommands, its members' PIDs, and a failed job explained with the members' logs.
    A subclass names its `script` and reads its endpoints in `start` and its logs in `log_files`."""

    script = ""

    def __init__(self, folder, env):
        self.folder, self.env = folder, env

    def _script(self, command):
        return subprocess.run(["bash", self.script, command], capture_output=True, text=True, env=self.env,
                              timeout=600)

    def stop(self):
        return self._script("stop")

    def pid(self, name):
        with open(os.path.join(self.folder, "pids", f"{name}.pid")) as f:
            return int(f.read().split()[0])

    def log_files(self):
        """The members' log files, in the order a failure message shows them."""
        raise NotImplementedError

    def logs(self, lines=60):
        """The end of every member's log, for a failure message."""
        parts = []
        for path in self.log_files():
            with open(path, errors="replace") as f:
                tail = [line[:400] for line in f.read().splitlines()[-lines:]]
            parts.append(f"----- {path}\n" + "\n".join(tail))
        return "\n".join(parts)

    def explain(self, result):
        """A failed job's output and the cluster's logs."""
        return (f"exit code {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-6000:]}\n"
                f"===== cluster logs\n{self.logs()}")
