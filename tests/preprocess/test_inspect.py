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


def test_the_summary_as_json_for_programs(tiny_job, capsys):
    import json

    out, _, rows = tiny_job
    assert inspect.run([out, "--format", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((out / "manifest.json").read_text()) if hasattr(out, "read_text") else None
    assert summary["rows"] == len(rows) and summary["statistics"]["label_vocabulary"]
    assert manifest is None or summary["splits"] == manifest["splits"]


def test_labels_are_escaped_and_cut_in_the_terminal_summary():
    manifest = {"rows": 1, "written": 1, "failed": 0, "splits": {}, "failed_by_reason": {},
                "statistics": {"pixel_mean": [0, 0, 0], "pixel_std": [1, 1, 1],
                               "label_vocabulary": ["cat\u202egpj", "\x1b[2J" + "y" * 10_000]},
                "config": {"preprocess": {}}, "wall_seconds": 1, "images_per_second": 1, "runner": "x"}
    text = inspect.format_report(manifest)
    assert "\u202e" not in text and "\x1b" not in text and "cat\\u202egpj" in text
    assert max(map(len, text.splitlines())) < 200


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


def test_a_multi_label_run_s_samples_show_every_label(tiny_raw_job):
    from tf_serving_input.layout import OutputLayout

    manifest = OutputLayout(tiny_raw_job).load_manifest()
    samples = inspect.sample_records(tiny_raw_job, manifest, 12)
    assert len(samples) == 12 and any("|" in label for _, label, _ in samples)
