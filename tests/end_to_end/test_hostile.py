"""Every kind of broken or unusual input a million-image CSV brings, through the real command line.

Each input is either written correctly or listed in errors.jsonl with a specific reason, and
rows == written + failed. The table this test prints (pytest -s) is the list in the README.
"""


import unicodedata
import urllib.parse

import numpy as np
import pytest
from PIL import Image

import imaging
import in_process
import outputs

SIZE = 32
UPRIGHT = imaging.quadrants(48, 64)


def hostile_files():
    """name -> (bytes, "folder" or None (absent), expected reason code or None when it must be written)."""
    jpeg = imaging.encode(UPRIGHT, "JPEG", quality=95)
    larger = imaging.encode(imaging.quadrants(120, 160), "JPEG", quality=90)  # Its half holds the whole header.
    rgba = np.dstack([UPRIGHT, np.full(UPRIGHT.shape[:2], 128, np.uint8)])
    files = {
        "zero bytes.jpg": (b"", "empty_file"),
        "truncated.jpg": (jpeg[: len(jpeg) // 3], "truncated"),
        # libjpeg decodes these two with a grey rest, and only a warning; whole images with grey there are kept.
        "cut, end marker put back.jpg": (imaging.cut_jpeg(larger, len(larger) // 2), "truncated"),
        "header claims 12000x8000.jpg": (imaging.jpeg_claiming_size(jpeg, 8000, 12000), "truncated"),
        "grey band at the bottom.jpg": (imaging.encode(np.vstack([UPRIGHT[:32], imaging.solid(128, 16, 64)]), "JPEG"),
                                        None),
        "flat grey.jpg": (imaging.encode(imaging.solid(128, 8, 8), "JPEG"), None),
        "bit flips.jpg": (jpeg[:400] + bytes(b ^ 0x5A for b in jpeg[400:700]) + jpeg[700:], "corrupt"),
        "text.jpg": (b"just some text, not a picture\n", "not_an_image"),
        "page.jpg": (b"<!DOCTYPE html><html><body>Not Found</body></html>", "not_an_image"),
        "bomb.png": (imaging.png_claiming_size(60000, 60000), "too_many_pixels"),
        "missing.jpg": (None, "file_not_found"),
        "a folder.jpg": ("folder", "is_a_directory"),
        "scan.tiff": (imaging.encode(UPRIGHT, "TIFF"), "unsupported_format"),
        "icon.ico": (imaging.encode(UPRIGHT, "ICO"), "unsupported_format"),
        "drawing.svg": (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "unsupported_format"),
        "paper.pdf": (b"%PDF-1.7\n%...", "unsupported_format"),
        "photo.heic": (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64, "unsupported_format"),
        "photo.avif": (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf" + b"\x00" * 64, "unsupported_format"),
        "png named.jpg": (imaging.encode(UPRIGHT, "PNG"), None),
        "cmyk.jpg": (imaging.encode(Image.fromarray(UPRIGHT).convert("CMYK"), "JPEG", quality=95), None),
        "gray.jpg": (imaging.encode(Image.fromarray(UPRIGHT).convert("L"), "JPEG"), None),
        "progressive.jpg": (imaging.encode(UPRIGHT, "JPEG", progressive=True), None),
        "sixteen bit.png": (imaging.encode(Image.fromarray(UPRIGHT[..., 0].astype(np.uint16) * 257), "PNG"), None),
        "palette.png": (imaging.encode(Image.fromarray(UPRIGHT).convert("P"), "PNG"), None),
        "transparent.png": (imaging.encode(rgba, "PNG"), None),
        "animated.gif": (imaging.animated_gif([UPRIGHT, UPRIGHT[::-1]]), None),
        "bitmap.bmp": (imaging.encode(UPRIGHT, "BMP"), None),
        "lossless.webp": (imaging.encode(UPRIGHT, "WEBP", lossless=True), None),
        "one pixel.png": (imaging.encode(imaging.solid((9, 99, 199), 1, 1), "PNG"), None),
        "wide.png": (imaging.encode(imaging.solid((200, 10, 10), 1, 2000), "PNG"), None),
        "tall.png": (imaging.encode(imaging.solid((10, 10, 200), 2000, 1), "PNG"), None),
        'comma, "quote" and space.png': (imaging.encode(UPRIGHT, "PNG"), None),
        "größe 大きい ñ.png": (imaging.encode(UPRIGHT, "PNG"), None),
    }
    for orientation in range(1, 9):
        files[f"exif {orientation}.jpg"] = (imaging.exif_jpeg(UPRIGHT, orientation), None)
    return files


def odd_rows(folder):
    """Path cell -> (label, expected reason or None when written): file: URLs, stray spaces, near misses."""
    quoted = urllib.parse.quote(str(folder / "größe 大きい ñ.png"))
    return {
        f"file://{quoted}": ("x ", None),  # A file: URL is that file (RFC 8089, percent-encoded).
        f"FILE://localhost{quoted}": (" x", None),
        f"file://nas.example{quoted}": ("x", "remote_file_url"),  # Another machine's file: refused, not read.
        "file:größe.png": ("x", "bad_url"),  # A file: URL's path is absolute.
        "./gray.jpg": ("   ", None),  # A blank label: unlabeled.
        " png named.jpg": ("x", "file_not_found"),  # Near misses: named in the detail, never read.
        unicodedata.normalize("NFD", "größe 大きい ñ.png"): ("x", "file_not_found"),
    }


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    files = hostile_files()
    rows = []
    for name, (data, _) in files.items():
        if data == "folder":
            (folder / name).mkdir()
        elif data is not None:
            (folder / name).write_bytes(data)
        rows.append([name, "x"])
    rows.append(["png named.jpg", "x"])  # A duplicate row: written twice, under two keys.
    rows += [[cell, label] for cell, (label, _) in odd_rows(folder).items()]
    imaging.write_csv(folder / "in.csv", ["path", "label"], rows)
    out = folder / "out"
    # In this process (tests/in_process.py): each row's outcome is decided inside the pipeline, whatever the
    # runner; tests/end_to_end/test_cli.py runs the command line with worker processes on bad files.
    result = in_process.run_module("beam_pipeline", "--input_csv", folder / "in.csv", "--output_dir", out,
                                   "--image_size", SIZE, "--image_format", "png", "--max_error_rate", "0.5",
                                   "--no_progress")
    assert result.returncode == 0, result.stderr[-3000:]
    return files, rows, out, result.stdout


def test_every_hostile_input_is_written_or_explained(hostile_run):
    files, rows, out, _ = hostile_run
    manifest = outputs.manifest(out)
    errors = {e["source"]: e for e in outputs.errors(out)}
    images = outputs.images_by_source(out)
    assert manifest["rows"] == len(rows) == manifest["written"] + manifest["failed"]
    print("\ninput | outcome")
    for name, (_, expected_error) in files.items():
        outcome = (f"failed: {errors[name]['reason']} ({errors[name]['detail']})" if name in errors
                   else "written" if name in images else "LOST")
        print(f"{name} | {outcome}")
        if expected_error is None:
            assert name in images and name not in errors, outcome
            assert all(image.shape == (SIZE, SIZE, 3) for _, image in images[name])
        else:
            assert errors.get(name, {}).get("reason") == expected_error and name not in images, outcome
    for name in ("scan.tiff", "icon.ico", "drawing.svg", "paper.pdf", "photo.heic", "photo.avif"):
        assert errors[name]["detail"].startswith(name.split(".")[-1].upper().replace("HEIC", "HEIF")), errors[name]


def test_duplicates_are_kept_apart_and_exif_orientations_agree(hostile_run):
    _, _, out, _ = hostile_run
    images = outputs.images_by_source(out)
    duplicates = images["png named.jpg"]
    assert len(duplicates) == 2 and duplicates[0][0] != duplicates[1][0]
    upright = images["exif 1.jpg"][0][1].astype(int)
    for orientation in range(2, 9):
        turned = images[f"exif {orientation}.jpg"][0][1].astype(int)
        assert np.abs(turned - upright).mean() < 2.0, orientation  # Same upright picture.
    reference = images["png named.jpg"][0][1].astype(int)
    assert np.abs(upright - reference).mean() < 3.0


def test_file_urls_are_files_labels_are_stripped_and_near_misses_are_named(hostile_run):
    _, _, out, summary = hostile_run
    errors = {e["source"]: e for e in outputs.errors(out)}
    images = outputs.images_by_source(out)
    odd = odd_rows(out.parent)
    for cell, (_, reason) in odd.items():
        if reason is None:
            assert cell in images and cell not in errors, (cell, errors.get(cell))
        else:
            assert errors.get(cell, {}).get("reason") == reason and cell not in images, (cell, errors.get(cell))
    name = str(out.parent / "größe 大きい ñ.png")
    twin = images["größe 大きい ñ.png"][0][1]
    assert all((images[cell][0][1] == twin).all() for cell in list(odd)[:2])  # The file's own pixels.
    assert f"did you mean '{out.parent / 'png named.jpg'}' (surrounding spaces removed)" in \
        errors[" png named.jpg"]["detail"]
    assert f"did you mean '{name}' (the name in Unicode NFC)" in errors[list(odd)[-1]]["detail"]
    # Labels: the stray spaces go, a blank one is unlabeled, and the summary and manifest say how many.
    labels = {example["image/source"].decode(): example["label/text"].decode() for example in outputs.all_examples(out)}
    assert [labels[cell] for cell in list(odd)[:2]] == ["x", "x"] and labels["./gray.jpg"] == ""
    manifest = outputs.manifest(out)
    assert manifest["statistics"]["label_vocabulary"] == ["x"]
    assert manifest["label_cells"] == {"stripped": 2, "blank": 1}
    lines = [" ".join(line.split()) for line in summary.splitlines()]
    assert "labels stripped 2 had surrounding spaces, stripped" in lines, summary
    assert "labels blank 1 held only spaces: unlabeled" in lines, summary
