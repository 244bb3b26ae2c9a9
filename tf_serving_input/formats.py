"""Image container formats, told apart by their magic bytes (never by a file's name).

`SIGNATURES` is the one table of magic bytes. `preprocessing.sniff_format`
evaluates it in TensorFlow ops for decoding; `sniff` evaluates it on the host
to describe a failure. Pure Python.
"""

from __future__ import annotations

from typing import TypeAlias

# Formats the preprocessing decodes, in the order of its decode branches.
SUPPORTED = ("jpeg", "png", "gif", "bmp", "webp")
# Image or document formats recognised only to name them when refusing them. TIFF is among
# them: TensorFlow has no TIFF decoder, and the serving signature may only use ops that
# TensorFlow Serving has (tensorflow-io's decoder is a custom op it lacks).
UNSUPPORTED = ("tiff", "heif", "avif", "jpeg2000", "jpegxl", "svg", "pdf", "ico", "psd", "openexr", "dicom")
NAMES = SUPPORTED + UNSUPPORTED

# Bytes a signature may look at: the widest offset below plus its magic.
SNIFF_BYTES = 512
# Offset that means "anywhere within the first SNIFF_BYTES" (text formats).
ANYWHERE = -1

_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"hevm", b"hevs", b"mif1", b"msf1")

# (format, ((offset, magic), ...)): a format matches when every (offset, magic) pair does.
Signature: TypeAlias = tuple[str, tuple[tuple[int, bytes], ...]]
SIGNATURES: tuple[Signature, ...] = (
    ("jpeg", ((0, b"\xff\xd8\xff"),)),
    ("png", ((0, b"\x89PNG\r\n\x1a\n"),)),
    ("gif", ((0, b"GIF87a"),)),
    ("gif", ((0, b"GIF89a"),)),
    ("bmp", ((0, b"BM"),)),
    ("webp", ((0, b"RIFF"), (8, b"WEBP"))),
    ("tiff", ((0, b"II*\x00"),)),
    ("tiff", ((0, b"MM\x00*"),)),
    *(("heif", ((4, b"ftyp"), (8, brand))) for brand in _HEIF_BRANDS),
    ("avif", ((4, b"ftyp"), (8, b"avif"))),
    ("avif", ((4, b"ftyp"), (8, b"avis"))),
    ("jpeg2000", ((0, b"\x00\x00\x00\x0cjP  \r\n\x87\n"),)),
    ("jpeg2000", ((0, b"\xff\x4f\xff\x51"),)),
    ("jpegxl", ((0, b"\xff\x0a"),)),
    ("jpegxl", ((0, b"\x00\x00\x00\x0cJXL \r\n\x87\n"),)),
    ("pdf", ((0, b"%PDF-"),)),
    ("ico", ((0, b"\x00\x00\x01\x00"),)),
    ("ico", ((0, b"\x00\x00\x02\x00"),)),  # .cur
    ("psd", ((0, b"8BPS"),)),
    ("openexr", ((0, b"\x76\x2f\x31\x01"),)),
    ("dicom", ((128, b"DICM"),)),
    ("svg", ((ANYWHERE, b"<svg"),)),
)
assert {name for name, _ in SIGNATURES} == set(NAMES)


def sniff(data: bytes) -> str | None:
    """The format name of encoded bytes by their magic bytes, or None when none matches."""
    head = data[:SNIFF_BYTES]
    for name, parts in SIGNATURES:
        if all(magic in head if offset == ANYWHERE else head[offset:offset + len(magic)] == magic
               for offset, magic in parts):
            return name
    return None


def looks_truncated(data: bytes, name: str) -> bool:
    """Whether bytes of a supported format end before their format says they do."""
    tail = data.rstrip(b"\x00")
    if name == "jpeg":
        return not tail.endswith(b"\xff\xd9")  # End-of-image marker.
    if name == "png":
        return b"IEND" not in data[-12:]  # The IEND chunk closes every PNG.
    if name == "gif":
        return not tail.endswith(b";")  # The trailer byte.
    if name == "webp":
        return len(data) < 8 or int.from_bytes(data[4:8], "little") + 8 > len(data)  # RIFF size.
    if name == "bmp":
        return len(data) < 6 or int.from_bytes(data[2:6], "little") > len(data)  # File size field.
    return False
