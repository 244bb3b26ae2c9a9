"""What a command shows in a terminal: stored text escaped and cut, notices on stderr even while a run's log
captures descriptor 2."""

import os
import subprocess
import sys

from beam_pipeline.common import terminal
from beam_pipeline.common.run_errors import RunLog

HOSTILE = {
    "right-to-left override": ("cat\u202egpj.exe", "cat\\u202egpj.exe"),
    "escape sequence": ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),
    "newline and NUL": ("a\nb\x00c", "a\\x0ab\\x00c"),
    "zero-width space and joiner": ("a\u200bb\u200dc", "a\\u200bb\\u200dc"),
    "bidi isolate": ("\u2067x\u2069", "\\u2067x\\u2069"),
    "C1 control": ("a\x9bb", "a\\x9bb"),
    "unicode letters stay": ("chat noir \u00e9\u4e2d", "chat noir \u00e9\u4e2d"),
}


def test_stored_text_is_escaped_so_the_terminal_shows_what_is_there():
    for name, (text, shown) in HOSTILE.items():
        assert terminal.shown(text, width=1000) == shown, name
        assert terminal.shown(text).isprintable(), name


def test_long_text_is_cut_to_the_width_with_a_mark():
    label = "x" * 10_000
    assert terminal.shown(label) == "x" * (terminal.LABEL_WIDTH - 3) + "..."
    assert len(terminal.shown(label, terminal.PATH_WIDTH)) == terminal.PATH_WIDTH
    assert terminal.shown("short") == "short" and terminal.shown(None) == ""
    # Escaping happens before cutting (the width is what the terminal shows), and never cuts an escape in half.
    assert terminal.shown("\u202e" * 100, 20) == "\\u202e\\u202e..."
    assert terminal.shown("ab" + "\u200b" * 5, 10) == "ab..."


def test_notices_reach_the_terminal_while_the_run_log_captures_descriptor_2(tmp_path):
    # A fresh interpreter whose sys.stderr is descriptor 2 itself, as for a user's command.
    script = (
        "import os, sys\n"
        "from beam_pipeline.common import terminal\n"
        "from beam_pipeline.common.run_errors import RunLog\n"
        f"log = RunLog({str(tmp_path)!r})\n"
        "with log.capture():\n"
        "    terminal.notice('progress: 1/2 shards')\n"
        "    os.write(2, b'a worker line\\n')\n"
        "print('result')\n"
        "print('captured:', list(log.records))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, result.stderr
    assert result.stderr == "progress: 1/2 shards\n"  # The notice on stderr, the worker's line in the log.
    assert result.stdout == "result\ncaptured: ['a worker line']\n"


def test_a_notice_goes_to_a_replaced_stderr(capsys, tmp_path):
    with RunLog(str(tmp_path)).capture():
        terminal.notice("progress: done")
    captured = capsys.readouterr()
    assert captured.err == "progress: done\n" and captured.out == ""


def test_a_list_of_labels_fits_one_line():
    labels = ["cat", "\u202e" + "x" * 10_000, "dog"] + [f"label{i}" for i in range(100)]
    line = terminal.shown_list(labels)
    assert line.startswith("cat, \\u202exxx") and line.endswith(", ...") and len(line) <= terminal.PATH_WIDTH
    assert terminal.shown_list(["a", "b"]) == "a, b" and terminal.shown_list([]) == ""


def test_labels_holding_commas_or_quotes_are_quoted_so_the_list_reads_one_way():
    one = terminal.shown_list(['coffee, "espresso"', "cat"])
    three = terminal.shown_list(["coffee", '"espresso"', "cat"])
    assert one == '"coffee, \\"espresso\\"", cat' and three == 'coffee, "\\"espresso\\"", cat'
    assert terminal.shown_list(["a", "", " b", "c "]) == 'a, "", " b", "c "'
    assert terminal.shown_list(["cat", "dog"]) == "cat, dog"  # Plain labels as they are.
