"""Quiet by default: TensorFlow's start-up lines are dropped from stderr, in this process and its children."""

import subprocess
import sys

import pytest

from beam_pipeline.common.quiet import is_startup_line

NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796124675.264187   27783 port.cc:153] oneDNN custom operations are on. You may see slightly",
    "I0000 00:00:1796124675.264508   27783 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
    "I0000 00:00:1796124681.997039   27889 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
    "compiler flags.",
]
KEPT = ["error: the CSV has no rows", "E0000 00:00:1796124675.2 27783 some_op.cc:1] a real TensorFlow error",
        "Traceback (most recent call last):"]


def test_only_the_start_up_lines_are_recognized():
    assert all(is_startup_line(line.encode()) for line in NOISE)
    assert not any(is_startup_line(line.encode()) for line in KEPT)


def run_python(code, *argv):
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)


WINDOW = (
    "import os, subprocess, sys\n"
    "from beam_pipeline.common.quiet import startup_lines_filtered\n"
    f"noise, kept = {NOISE!r}, {KEPT!r}\n"
    "print('before', file=sys.stderr, flush=True)\n"
    "with startup_lines_filtered():\n"
    "    os.write(2, ('\\n'.join(noise[:3] + kept[:1]) + '\\n').encode())\n"
    # A child process inherits the filtered descriptor too.
    "    subprocess.run([sys.executable, '-c', 'import os, sys; os.write(2, sys.argv[1].encode())', "
    "'\\n'.join(noise[3:] + kept[1:]) + '\\n'])\n"
    "print('after', file=sys.stderr, flush=True)\n")


def test_inside_the_window_start_up_lines_are_dropped_and_the_rest_kept_in_order():
    result = run_python(WINDOW)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["before", *KEPT, "after"]


@pytest.mark.slow  # A fresh interpreter importing TensorFlow: the full suite's, not the everyday lane's.
def test_outside_an_import_nothing_is_delayed_or_lost_when_the_process_dies():
    code = ("import os, signal, sys\nfrom beam_pipeline.common.quiet import quiet_startup\nquiet_startup([])\n"
            "import tensorflow\nprint('last words', file=sys.stderr, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    result = run_python(code)
    assert result.returncode == -9 and result.stderr.splitlines() == ["last words"], result.stderr


@pytest.mark.slow  # Three fresh processes importing TensorFlow (3-4 s each): the full suite's, not the everyday lane's.
# "--verb" is no flag (the commands refuse abbreviations): quiet until the refusal.
@pytest.mark.parametrize("argv,quiet", [([], True), (["--verbose"], False), (["--verb"], True)])
def test_importing_tensorflow_prints_no_start_up_line_unless_verbose(argv, quiet):
    code = ("import sys\nfrom beam_pipeline.common.quiet import quiet_startup\nquiet_startup(sys.argv[1:])\n"
            "import tensorflow as tf\nimport tensorflow_transform\nprint(int(tf.constant(2) + 1))")
    result = run_python(code, *argv)
    assert result.returncode == 0 and result.stdout.strip() == "3", result.stderr[-2000:]
    noisy = [line for line in result.stderr.splitlines() if is_startup_line(line.encode())]
    # With --verbose TensorFlow does print them here: the quiet case is not passing by accident.
    assert (noisy == []) if quiet else noisy, result.stderr
