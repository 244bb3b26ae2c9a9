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


PRINT_BOTH = (
    "import os, subprocess, sys\n"
    "from beam_pipeline.common.quiet import quiet_startup\n"
    "quiet_startup(sys.argv[1:])\n"
    f"lines = {NOISE + KEPT!r}\n"
    "os.write(2, ('\\n'.join(lines[:3]) + '\\n').encode())\n"
    "print(lines[-3], file=sys.stderr)\n"
    # A child (as Beam's worker processes are) inherits the filtered descriptor.
    "subprocess.run([sys.executable, '-c', 'import os, sys; os.write(2, sys.argv[1].encode())', "
    "'\\n'.join(lines[3:]) + '\\n'])\n"
    "sys.stderr.write('no newline at the end')\n")


def test_start_up_lines_of_the_process_and_its_children_are_dropped_and_the_rest_kept():
    result = run_python(PRINT_BOTH)
    assert result.returncode == 0
    assert result.stderr.splitlines() == [KEPT[0], *KEPT, "no newline at the end"]


def test_verbose_lets_them_through():
    result = run_python(PRINT_BOTH, "--verbose")
    assert set(NOISE) <= set(result.stderr.splitlines())


@pytest.mark.parametrize("quiet", [True, False])
def test_importing_tensorflow_prints_no_start_up_line_when_quiet(quiet):
    code = ("import sys\nfrom beam_pipeline.common.quiet import quiet_startup\n"
            + ("quiet_startup([])\n" if quiet else "") + "import tensorflow as tf\nprint(int(tf.constant(2) + 1))")
    result = run_python(code)
    assert result.returncode == 0 and result.stdout.strip() == "3", result.stderr[-2000:]
    noisy = [line for line in result.stderr.splitlines() if is_startup_line(line.encode())]
    # Unfiltered, TensorFlow does print them here: the quiet case is not passing by accident.
    assert (noisy == []) if quiet else noisy, result.stderr
