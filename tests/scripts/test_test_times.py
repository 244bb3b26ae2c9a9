"""scripts/test_times.py: the seconds per test file that scripts/test.sh prints, from pytest's own JUnit XML."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "scripts"))  # No `import outputs`: it imports TensorFlow.

import test_times  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def junit_runs(tmp_path_factory):
    """A JUnit XML file written by pytest itself over two small generated test modules, and a copy of it with
    one file's times doubled: (before, after)."""
    folder = tmp_path_factory.mktemp("junit")
    (folder / "tests" / "sub").mkdir(parents=True)
    (folder / "tests" / "sub" / "test_a.py").write_text(
        "import pytest, time\n"
        "@pytest.fixture(scope='module')\ndef slow():\n    time.sleep(0.2)\n"
        "def test_one(slow): pass\n"
        "@pytest.mark.parametrize('n', [1, 2])\ndef test_two(n): pass\n"
        "class TestGroup:\n    def test_three(self): pass\n"
        "def test_burns_cpu():\n    t = time.process_time()\n    while time.process_time() - t < 0.3: pass\n"
        "@pytest.mark.skip('not here')\ndef test_skipped(): pass\n")
    (folder / "tests" / "test_b.py").write_text("def test_b(): pass\n")
    after = folder / "after.xml"
    # With the suite's CPU plugin (tests/cpu_time.py), as tests/conftest.py loads it.
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "cpu_time",
                    "--rootdir", str(folder), "-o", "addopts=", "--junitxml", str(after), "tests"],
                   cwd=folder, capture_output=True, text=True, check=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get("PYTHONPATH", "")])))
    tree = ElementTree.parse(after)
    for case in tree.getroot().iter("testcase"):
        if case.get("classname") == "tests.test_b":
            case.set("time", "12.5")
    tree.write(folder / "before.xml")
    return str(folder / "before.xml"), str(after)


def test_seconds_and_counts_per_file_include_fixtures_and_leave_out_skipped_tests(junit_runs):
    seconds, counts = test_times.seconds_per_file(junit_runs[1])
    assert counts == {"tests/sub/test_a.py": 5, "tests/test_b.py": 1}  # Parametrized and class tests; no skip.
    assert seconds["tests/sub/test_a.py"] >= 0.2  # The module fixture's set-up counts in the file's time.
    assert seconds["tests/test_b.py"] < 0.2


def test_the_table_puts_the_slowest_file_first_and_sums_every_file(junit_runs, capsys):
    assert test_times.main([junit_runs[1], "--top", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "tests/sub/test_a.py" in lines[0] and "in all, 1 more files not shown" in lines[-1]
    assert "6 tests" in lines[-1]
    assert test_times.main([junit_runs[1], "--before", junit_runs[0], "--markdown"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| test file | tests before | seconds before | tests after | seconds after |"
    assert table[2].startswith("| `tests/test_b.py` | 1 | 12 | 1 | 0 |")  # Slowest before or after, first.
    assert table[3].startswith("| `tests/sub/test_a.py` | 5 |") and table[-1].startswith("| **all files** | 6 |")


def test_a_missing_file_is_one_line_and_exit_2(tmp_path, capsys):
    assert test_times.main([str(tmp_path / "none.xml")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read a JUnit XML file")


def test_cpu_seconds_are_recorded_per_test_and_summed_per_file(junit_runs, capsys):
    """The module fixture sleeps (wall, no CPU); test_burns_cpu spins 0.3 s of CPU: the CPU column tells them apart."""
    seconds, _, cpu = test_times.times_per_file(junit_runs[1])
    assert set(cpu) == {"tests/sub/test_a.py", "tests/test_b.py"}  # Every test recorded its CPU seconds.
    assert cpu["tests/sub/test_a.py"] >= 0.3 and cpu["tests/test_b.py"] < 0.1
    assert seconds["tests/sub/test_a.py"] >= 0.5  # Wall: the 0.2 s sleep and the 0.3 s spin.
    assert test_times.main([junit_runs[1], "--by", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "tests/sub/test_a.py" in lines[0] and " s CPU " in lines[0]
