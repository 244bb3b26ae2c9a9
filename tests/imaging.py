"""Tiny test images made on the fly, in every format and flavour the job must handle."""

import io

import numpy as np
from PIL import Image

# EXIF orientation -> the PIL transpose that stores upright pixels so that the
# orientation brings them back (the inverse of what a viewer applies).
STORE_FOR_ORIENTATION = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def quadrants(height=48, width=64):
    """An RGB uint8 image with four flat coloured quadrants: orientation errors show at once."""
    image = np.zeros((height, width, 3), np.uint8)
    image[: height // 2, : width // 2] = (220, 30, 30)
    image[: height // 2, width // 2:] = (30, 200, 30)
    image[height // 2:, : width // 2] = (30, 30, 210)
    image[height // 2:, width // 2:] = (240, 240, 40)
    return image


def solid(color, height=16, width=16):
    """A flat RGB image of one colour."""
    return np.full((height, width, 3), color, np.uint8)


def photo_like(rng, height, width):
    """A smooth image with a little noise: decodes at the cost of a real photo of that size."""
    # Broadcast rows and columns in int32: the same pixels as full int64 grids, 7x faster (0.72 -> 0.10 s a
    # 1600x1200 image; test_reliability makes 48 of them).
    x = np.arange(width, dtype=np.int32)[None, :]
    y = np.arange(height, dtype=np.int32)[:, None]
    image = np.empty((height, width, 3), np.int32)
    image[..., 0] = x * 255 // width
    image[..., 1] = y * 255 // height
    image[..., 2] = (x + y) * 127 // (height + width)
    image += rng.integers(-6, 7, size=image.shape).astype(np.int32)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(array_or_image, fmt, **options):
    """Encodes a NumPy array or PIL image with PIL; fmt is a PIL format name ('JPEG', 'PNG', ...)."""
    image = array_or_image if isinstance(array_or_image, Image.Image) else Image.fromarray(array_or_image)
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def exif_jpeg(upright, orientation, quality=100):
    """JPEG bytes whose pixels are stored turned, with the EXIF orientation that turns them upright."""
    image = Image.fromarray(upright)
    transpose = STORE_FOR_ORIENTATION[orientation]
    stored = image.transpose(transpose) if transpose is not None else image
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(stored, "JPEG", quality=quality, subsampling=0, exif=exif.tobytes())


def animated_gif(frames):
    """GIF bytes with one frame per (H, W, 3) array."""
    images = [Image.fromarray(frame).convert("P") for frame in frames]
    out = io.BytesIO()
    images[0].save(out, "GIF", save_all=True, append_images=images[1:], duration=100, loop=0)
    return out.getvalue()


def png_claiming_size(width, height):
    """A PNG whose IHDR claims width x height but holds no pixel data (a decompression-bomb header)."""
    import struct
    import zlib

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk) & 0xFFFFFFFF) + b"\x00\x00\x00\x00IEND\xaeB`\x82")


def write_csv(path, header, rows):
    """Writes a CSV with Python's csv module (RFC 4180 quoting)."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def small_dataset(folder, count=10, size=64):
    """`count` random PNGs in `folder` and their CSV (path, label in a/b); returns the CSV path."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(count):
        name = f"img{i}.png"
        (folder / name).write_bytes(encode(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), "PNG"))
        rows.append([name, "ab"[i % 2]])
    write_csv(folder / "in.csv", ["path", "label"], rows)
    return folder / "in.csv"


def cut_jpeg(data, end):
    """JPEG bytes cut at `end` (a byte offset), with an end-of-image marker put back after the cut.

    libjpeg (and so TensorFlow and Pillow) decodes such a file with only a warning ("premature end of
    data segment") and fills what the scan no longer holds with grey (128, 128, 128).
    """
    return data[:end] + b"\xff\xd9"


def scan_starts(data):
    """Offsets of the start-of-scan (FF DA) markers of JPEG bytes without a thumbnail: one a baseline scan."""
    return [index for index in range(len(data) - 1) if data[index:index + 2] == b"\xff\xda"]


def jpeg_claiming_size(data, height, width):
    """JPEG bytes whose frame header (SOF0/SOF2) claims height x width, more than its scan data holds."""
    import struct

    start = min(i for i in (data.find(b"\xff\xc0"), data.find(b"\xff\xc2")) if i >= 0)
    return data[:start + 5] + struct.pack(">HH", height, width) + data[start + 9:]
