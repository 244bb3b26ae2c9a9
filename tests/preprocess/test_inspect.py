"""`inspect` on a finished output, in-process: the summary, and one-line refusals of contact sheets it cannot make."""

import pytest

from beam_pipeline.preprocess import inspect


def test_the_summary_and_a_contact_sheet(tiny_job, tmp_path, capsys):
    out, _, rows = tiny_job
    sheet = tmp_path / "sheet.png"
    assert inspect.run([out, "--contact_sheet", str(sheet), "--samples", "4"]) == 0
    printed = capsys.readouterr().out
    assert f"rows {len(rows)}" in printed and "contact sheet:" in printed
    assert sheet.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("flags,message", [
    (["--samples", "0"], "--samples must be at least 1"),
    (["--split", "nosuch"], "--split 'nosuch': "),
    (["--contact_sheet", "/nonexistent/folder/sheet.png"], "not a writable file path"),
])
def test_a_contact_sheet_it_cannot_make_is_one_line(tiny_job, tmp_path, capsys, flags, message):
    out, _, _ = tiny_job
    argv = [out, "--contact_sheet", str(tmp_path / "sheet.png"), *flags]
    assert inspect.run(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and message in line
