"""The only image decode / orient / resize / encode code of the project, in TensorFlow ops.

The Beam job, the training reader and the serving signature all call these
functions, so an image is turned into model input the same way everywhere.
Every function works eagerly, inside `tf.data` and inside a `tf.function`
(the tests check all three), and none of them uses Python per pixel.

Before decoding, `inspect_image` checks what the bytes are and what their
header claims, and returns what it found as numbers (a problem index into
`failures.PROBLEMS`, the format, the size): the Beam job records a failed row
from those without parsing any message. `preprocess_image` and `decode_image`
turn a problem into `tf.errors.InvalidArgumentError` whose message starts with
the reason code ("not_an_image: ...", "too_many_pixels: ..."), which is what a
serving request sees. A decode op that fails on bad data raises its own error;
a JPEG whose scan ends before its image does (cut, with an end-of-image marker
after the cut, or a header claiming more than the data holds), which libjpeg
would fill with grey, fails with "truncated: ..." (`scan_ends_early`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import tensorflow as tf

from tf_serving_input import failures, formats
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.steps import run_tf_steps

# Every branch below is already tf.cond / tf.switch_case / tf.while_loop, so AutoGraph has nothing to convert;
# left on (as tf.function and tf.data.Dataset.map leave it), it transpiled this module for 7.2 s of a 9.9 s
# trace of the job's preprocessing graph, in every worker process and every caller that traces. A user's TF
# step keeps AutoGraph: `steps.trace` wraps it in a tf.function of its own.
_Op = TypeVar("_Op", bound=Callable[..., Any])


def _graph_ops(fn: _Op) -> _Op:
    return cast(_Op, tf.autograph.experimental.do_not_convert(fn))

# A user's TF step as preprocessing runs it: (its name, the function traced by `steps.trace`).
Step = tuple[str, Callable[[tf.Tensor], tf.Tensor]]

_EXIF_ORIENTATION_TAG = 0x0112
# EXIF (APP1) must sit within the first 64 KiB: a JPEG segment is at most that long.
_EXIF_SEARCH_BYTES = 65536


# Every header field this module reads lies within the first 32 bytes.
_HEADER_BYTES = 32

# The default of the functions that take a PreprocessConfig (one shared instance: it is frozen).
_DEFAULT_CONFIG = PreprocessConfig()


def _header(data: tf.Tensor) -> tf.Tensor:
    """The first bytes of `data`, zero-padded to a fixed length so reads never run off the end."""
    return tf.strings.join([tf.strings.substr(data, 0, _HEADER_BYTES), b"\0" * _HEADER_BYTES])


def _bytes_at(header: tf.Tensor, offset: int, length: int) -> tf.Tensor:
    """Returns `length` bytes of a padded `_header` from `offset` as an int64 vector."""
    raw = tf.io.decode_raw(tf.strings.substr(header, offset, length), tf.uint8)
    return tf.reshape(tf.cast(raw, tf.int64), [length])


def _little_endian(raw: tf.Tensor) -> tf.Tensor:
    weights = tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64)[: raw.shape[0]]
    return tf.reduce_sum(raw * weights)


def _big_endian(raw: tf.Tensor) -> tf.Tensor:
    return _little_endian(tf.reverse(raw, [0]))


@dataclasses.dataclass(frozen=True)
class _SignatureTable:
    """Signatures as arrays: the fixed-offset ones as one byte table, the text ones (ANYWHERE) apart."""

    index: np.ndarray  # int32 [K]: each fixed-offset signature's index into formats.NAMES.
    magic: np.ndarray  # uint8 [K, L]: its magic bytes at their offsets.
    counts: np.ndarray  # bool [K, L]: which of those bytes it checks.
    text: tuple[tuple[int, bytes], ...]  # (index into formats.NAMES, magic) of the text signatures, in order.


def _signature_table(signatures: Sequence[formats.Signature]) -> _SignatureTable:
    fixed = [s for s in signatures if all(offset != formats.ANYWHERE for offset, _ in s[1])]
    text = [s for s in signatures if s not in fixed]
    # The first match wins: the table is checked before the text search, so text signatures must come last.
    assert list(signatures) == fixed + text and all(len(parts) == 1 for _, parts in text), signatures
    length = max(offset + len(magic) for _, parts in fixed for offset, magic in parts)
    magic, counts = np.zeros([len(fixed), length], np.uint8), np.zeros([len(fixed), length], bool)
    for row, (_, parts) in enumerate(fixed):
        for offset, part in parts:
            magic[row, offset:offset + len(part)] = np.frombuffer(part, np.uint8)
            counts[row, offset:offset + len(part)] = True
    return _SignatureTable(np.array([formats.NAMES.index(name) for name, _ in fixed], np.int32), magic, counts,
                           tuple((formats.NAMES.index(name), parts[0][1]) for name, parts in text))


def _match_signatures(data: tf.Tensor, table: _SignatureTable) -> tf.Tensor:
    """Index into formats.NAMES of the first signature of `table` that `data` matches, else -1.

    One comparison of the table for all fixed-offset signatures (a dozen ops, against ~40 for one
    test per signature), then a text search per text signature within the first SNIFF_BYTES.
    """
    length = table.magic.shape[1]
    head = tf.io.decode_raw(tf.strings.substr(data, 0, length), tf.uint8, fixed_length=length)  # Zero-padded.
    matches = tf.reduce_all(tf.logical_or(tf.equal(head, table.magic), ~table.counts), axis=1)
    first = tf.argmax(tf.cast(matches, tf.int32), output_type=tf.int32)
    index = tf.where(tf.reduce_any(matches), tf.gather(table.index, first), -1)
    start = tf.strings.substr(data, 0, formats.SNIFF_BYTES)
    for name_index, magic in reversed(table.text):  # Back to front: the first match wins.
        found = tf.strings.regex_full_match(start, "(?s).*" + "".join(f"\\x{b:02x}" for b in magic) + ".*")
        index = tf.where(tf.logical_and(index < 0, found), name_index, index)
    return index


_DECODED_SIGNATURES = _signature_table([s for s in formats.SIGNATURES if s[0] in formats.SUPPORTED])
_OTHER_SIGNATURES = _signature_table([s for s in formats.SIGNATURES if s[0] not in formats.SUPPORTED])


@_graph_ops
def sniff_format(data: tf.Tensor | bytes) -> tf.Tensor:
    """Returns the container format of encoded bytes as an int32 index into `formats.NAMES`.

    The format comes from the magic bytes (`formats.SIGNATURES`), never from a
    file name: 0..4 are the decoded formats (jpeg, png, gif, bmp, webp), higher
    indices formats recognised only to name them, -1 anything else.
    """
    data = tf.convert_to_tensor(data, tf.string)
    decoded = _match_signatures(data, _DECODED_SIGNATURES)
    # Only bytes of no decoded format pay for the longer list (and its text search).
    return tf.cond(decoded >= 0, lambda: decoded, lambda: _match_signatures(data, _OTHER_SIGNATURES))


def _webp_dimensions(data: tf.Tensor) -> tf.Tensor:
    chunk = tf.strings.substr(data, 12, 4)
    lossy = _bytes_at(data, 26, 4)  # 'VP8 ': 14-bit width, 14-bit height.
    mask = tf.constant(0x3FFF, tf.int64)
    lossy_hw = tf.stack([tf.bitwise.bitwise_and(_little_endian(lossy[2:4]), mask),
                         tf.bitwise.bitwise_and(_little_endian(lossy[0:2]), mask)])
    bits = _little_endian(_bytes_at(data, 21, 4))  # 'VP8L': packed 14-bit (w-1), (h-1).
    shifted = tf.bitwise.right_shift(bits, tf.constant(14, tf.int64))
    lossless_hw = tf.stack([tf.bitwise.bitwise_and(shifted, mask) + 1, tf.bitwise.bitwise_and(bits, mask) + 1])
    extended = _bytes_at(data, 24, 6)  # 'VP8X': 24-bit (w-1), (h-1).
    extended_hw = tf.stack([_little_endian(extended[3:6]) + 1, _little_endian(extended[0:3]) + 1])
    return tf.where(tf.equal(chunk, b"VP8L"), lossless_hw,
                    tf.where(tf.equal(chunk, b"VP8X"), extended_hw, lossy_hw))


@_graph_ops
def header_dimensions(data: tf.Tensor | bytes, image_format: tf.Tensor | int) -> tf.Tensor:
    """Returns [height, width] (int64) read from the image header, without decoding pixels."""
    full = tf.convert_to_tensor(data, tf.string)
    data = _header(full)

    def jpeg() -> tf.Tensor:
        return tf.cast(tf.image.extract_jpeg_shape(full)[:2], tf.int64)

    def png() -> tf.Tensor:
        return tf.stack([_big_endian(_bytes_at(data, 20, 4)), _big_endian(_bytes_at(data, 16, 4))])

    def gif() -> tf.Tensor:
        return tf.stack([_little_endian(_bytes_at(data, 8, 2)), _little_endian(_bytes_at(data, 6, 2))])

    def bmp() -> tf.Tensor:
        raw = _bytes_at(data, 18, 8)
        width, height = _little_endian(raw[0:4]), _little_endian(raw[4:8])
        # Heights are signed: negative means a top-down bitmap.
        height = tf.where(height >= 1 << 31, (1 << 32) - height, height)
        return tf.stack([height, width])

    def webp() -> tf.Tensor:
        return _webp_dimensions(data)

    return tf.switch_case(image_format, [jpeg, png, gif, bmp, webp])


@_graph_ops
def exif_orientation(data: tf.Tensor | bytes) -> tf.Tensor:
    """Returns the EXIF orientation (1..8) of JPEG bytes; 1 when absent or unreadable."""
    data = tf.convert_to_tensor(data, tf.string)
    head = tf.strings.substr(data, 0, _EXIF_SEARCH_BYTES)
    parts = tf.strings.split(head, sep=b"Exif\x00\x00", maxsplit=1)
    found = tf.equal(tf.size(parts), 2)
    prefix = parts[0]
    # The identifier must open an APP1 segment: FF E1, then a 2-byte length.
    marker = tf.strings.substr(prefix, tf.maximum(tf.strings.length(prefix) - 4, 0), 2)
    found = tf.logical_and(found, tf.equal(marker, b"\xff\xe1"))
    # Most photos carry no EXIF: only those pay for reading its IFD (~40 ops an image).
    return tf.cond(found, lambda: _tiff_orientation(parts[-1]), lambda: tf.constant(1, tf.int32))


def _tiff_orientation(tiff: tf.Tensor) -> tf.Tensor:
    """The orientation tag (1..8) of IFD0 of the TIFF structure that starts `tiff`; 1 when absent or invalid."""
    raw = tf.cast(tf.io.decode_raw(tf.strings.substr(tiff, 0, _EXIF_SEARCH_BYTES), tf.uint8), tf.int64)
    size = tf.size(raw, out_type=tf.int64)
    raw = tf.concat([raw, tf.zeros([16], tf.int64)], 0)  # Keeps every gather below in range.
    little = tf.equal(tf.strings.substr(tiff, 0, 2), b"II")

    def read(offsets: tf.Tensor, length: int) -> tf.Tensor:
        window = tf.gather(raw, offsets[..., None] + tf.range(length, dtype=tf.int64))
        weights = tf.constant([1, 1 << 8, 1 << 16, 1 << 24], tf.int64)[:length]
        return tf.where(little, tf.reduce_sum(window * weights, -1),
                        tf.reduce_sum(window * tf.reverse(weights, [0]), -1))

    ifd = tf.clip_by_value(read(tf.constant(4, tf.int64), 4), 0, size)
    count = tf.minimum(read(ifd, 2), tf.maximum((size - ifd - 2) // 12, 0))
    entries = ifd + 2 + 12 * tf.range(count)
    tags = read(entries, 2)
    values = read(entries + 8, 2)
    matches = tf.equal(tags, _EXIF_ORIENTATION_TAG)
    orientation = tf.where(tf.reduce_any(matches),
                           tf.reduce_max(tf.where(matches, values, 0)),
                           tf.constant(1, tf.int64))
    valid = tf.logical_and(orientation >= 1, orientation <= 8)
    return tf.cast(tf.where(valid, orientation, 1), tf.int32)


@_graph_ops
def apply_orientation(image: tf.Tensor, orientation: tf.Tensor | int) -> tf.Tensor:
    """Turns an [H, W, C] image stored with EXIF `orientation` (1..8) upright."""
    def transpose(x: tf.Tensor) -> tf.Tensor:
        return tf.transpose(x, [1, 0, 2])

    branches = [
        lambda: image,                                  # 1: upright
        lambda: tf.reverse(image, [1]),                 # 2: mirrored
        lambda: tf.reverse(image, [0, 1]),              # 3: rotated 180
        lambda: tf.reverse(image, [0]),                 # 4: flipped
        lambda: transpose(image),                       # 5: transposed
        lambda: tf.reverse(transpose(image), [1]),      # 6: needs 90 degrees clockwise
        lambda: tf.reverse(transpose(image), [0, 1]),   # 7: transversed
        lambda: tf.reverse(transpose(image), [0]),      # 8: needs 90 degrees counter-clockwise
    ]
    return tf.switch_case(tf.clip_by_value(orientation, 1, 8) - 1, branches)


@_graph_ops
def to_rgb(image: tf.Tensor) -> tf.Tensor:
    """Converts uint8 [H, W, 1|2|3|4] to [H, W, 3]; alpha is composited over white."""
    channels = tf.shape(image)[-1]

    def converted() -> tf.Tensor:
        has_alpha = tf.equal(channels % 2, 0)
        color_channels = channels - tf.cast(has_alpha, tf.int32)
        color = tf.gather(image, tf.minimum(tf.range(3), color_channels - 1), axis=-1)

        def composite() -> tf.Tensor:
            alpha = tf.cast(image[..., -1:], tf.float32) / 255.0
            blended = tf.cast(color, tf.float32) * alpha + 255.0 * (1.0 - alpha)
            return tf.cast(tf.clip_by_value(tf.round(blended), 0, 255), tf.uint8)

        return tf.cond(has_alpha, composite, lambda: color)

    # RGB already: the image itself (the gather copied it: 3 bytes a pixel more at --max_pixels).
    return tf.cond(tf.equal(channels, 3), lambda: image, converted)


# A JPEG whose scan data ends early (cut, then an end-of-image marker; or a frame header claiming
# more rows than the data holds) decodes in libjpeg with only a warning, the rest of the image
# exactly grey (128, 128, 128): every coefficient it never read is zero. A whole JPEG with grey
# there decodes alike, so pixels cannot tell; the scan can. Bytes put after each scan's data are
# read only by a scan that ends early: a decode with them differs from one without them exactly
# when a scan ran out. Random bytes (no FF; each chunk starts with 00, so that an FF left at a cut
# reads as data) decode as non-zero coefficients whatever the Huffman tables; a restart marker
# after each chunk keeps a restart-interval scan reading them.
def _scan_padding() -> bytes:
    rng = np.random.default_rng(20261205)
    chunks = [b"\0" + rng.integers(0, 255, 255 if k == 0 else 31, dtype=np.uint8).tobytes() + bytes([0xFF, 0xD0 + k])
              for k in range(8)]
    return b"".join(chunks)


_SCAN_PADDING = _scan_padding()
TRUNCATED_SCAN = ("JPEG scan data ends before the image does (cut, then an end-of-image marker, or a header "
                  "claiming more than the data holds): the rest would decode as flat grey")


def _scan_ends(data: tf.Tensor) -> tf.Tensor:
    """Offsets (int32, ascending) where each scan's entropy-coded data of JPEG bytes ends.

    Walks the marker segments from the start (APPn segments, an EXIF thumbnail's markers
    included, are skipped by their lengths); after a start-of-scan the data runs to the first
    marker that is not a restart marker, a stuffed FF 00 or a fill byte.
    """
    raw = tf.cast(tf.io.decode_raw(data, tf.uint8), tf.int32)
    size = tf.size(raw)
    padded = tf.concat([raw, tf.zeros([4], tf.int32)], 0)  # Reads past the end see zeros.
    following = padded[1:size + 1]
    markers = tf.cast(tf.where((raw == 0xFF) & (following != 0) & (following != 0xFF)
                               & ((following < 0xD0) | (following > 0xD7)))[:, 0], tf.int32)
    markers = tf.concat([markers, [size]], 0)

    def step(position: tf.Tensor, ends: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        marker = padded[position + 1]
        length = padded[position + 2] * 256 + padded[position + 3]
        data_start = position + 2 + length
        scan_end = tf.gather(markers, tf.minimum(tf.searchsorted(markers, data_start[None])[0], tf.size(markers) - 1))
        is_scan = tf.equal(marker, 0xDA)
        alone = (marker == 0xD8) | (marker == 0x01) | ((marker >= 0xD0) & (marker <= 0xD7))
        next_position = tf.where(marker == 0xFF, position + 1,  # A fill byte.
                                 tf.where(alone, position + 2, tf.where(is_scan, tf.maximum(scan_end, data_start),
                                                                        data_start)))
        stop = (padded[position] != 0xFF) | (marker == 0xD9)
        ends = tf.concat([ends, tf.boolean_mask(scan_end[None], (is_scan & ~stop)[None])], 0)
        return tf.where(stop, size, next_position), ends

    _, ends = tf.while_loop(lambda position, _: position < size - 1, step,
                            (tf.constant(2, tf.int32), tf.zeros([0], tf.int32)),
                            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))
    return ends


def _scan_ends_early_graph(data: tf.Tensor) -> tf.Tensor:
    ends = _scan_ends(data)
    starts = tf.concat([[0], ends], 0)
    pieces = tf.strings.substr(tf.fill(tf.shape(starts), data), starts,
                               tf.concat([ends, [tf.strings.length(data)]], 0) - starts)
    with_padding = tf.strings.reduce_join(pieces, separator=_SCAN_PADDING)
    return tf.reduce_any(tf.not_equal(tf.io.decode_jpeg(data, ratio=8), tf.io.decode_jpeg(with_padding, ratio=8)))


# A tf.function: traced once, called as one op from every graph that checks (eagerly too, where
# its loop would otherwise run op by op in Python). Not inlined: inlined, its ~100 ops would sit in
# the branch every image skips, each passed over at a cost.
_scan_ends_early = tf.function(_scan_ends_early_graph, input_signature=[tf.TensorSpec([], tf.string)], autograph=False,
                               experimental_attributes={"_noinline": True})


@_graph_ops
def scan_ends_early(data: tf.Tensor | bytes) -> tf.Tensor:
    """Whether a scan of JPEG bytes ends before its image does (a bool tensor); see `_SCAN_PADDING`.

    Two decodes at 1/8 scale (DC only, the cheapest), with and without padding after each scan.
    """
    return _scan_ends_early(tf.convert_to_tensor(data, tf.string))


def _refuse_a_scan_cut_short(data: tf.Tensor, image: tf.Tensor) -> tf.Tensor:
    """`image` (JPEG `data` decoded, before any turn), or "truncated: ..." when its scan ended early.

    Only an image whose last pixel is exactly (128, 128, 128) pays for the check: a scan that
    ended early leaves the last pixels so, an everyday photo almost never.
    """
    def checked() -> tf.Tensor:
        whole = tf.logical_not(scan_ends_early(data))
        with tf.control_dependencies([tf.debugging.Assert(whole, [f"{failures.TRUNCATED}: {TRUNCATED_SCAN}"])]):
            return tf.identity(image)

    return tf.cond(tf.reduce_all(tf.equal(image[-1, -1], 128)), checked, lambda: image)


@_graph_ops
def jpeg_shrink_index(height_width: tf.Tensor, shrink_to: int, resize_mode: str) -> tf.Tensor:
    """Index into (1, 2, 4, 8) of the largest DCT downscale that keeps the image big enough.

    The side `resize_mode` scales to image size (the shorter one for
    center_crop and stretch, the longer one for pad) must stay >= shrink_to.
    """
    side = (tf.reduce_max if resize_mode == "pad" else tf.reduce_min)(height_width)
    shrink_to = tf.cast(shrink_to, side.dtype)
    return tf.add_n([tf.cast(side // factor >= shrink_to, tf.int32) for factor in (2, 4, 8)])


@_graph_ops
def inspect_image(data: tf.Tensor | bytes,
                  max_pixels: int = PreprocessConfig.max_pixels) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """What the bytes are, before any pixel is decoded: (problem, format, [height, width]).

    `problem` (int32) indexes `failures.PROBLEMS`: 0 when the image can be
    decoded, else not an image, an unsupported format, more pixels than
    `max_pixels`, or a header claiming zero size. `format` (int32) indexes
    `formats.NAMES` (-1: unknown); [height, width] (int64) is the header's.
    """
    data = tf.convert_to_tensor(data, tf.string)
    image_format = sniff_format(data)
    supported = tf.logical_and(image_format >= 0, image_format < len(formats.SUPPORTED))
    height_width = tf.cond(supported,
                           lambda: header_dimensions(data, tf.clip_by_value(image_format, 0, 4)),
                           lambda: tf.zeros([2], tf.int64))
    pixels = height_width[0] * height_width[1]
    checks = [  # In failures.PROBLEMS order: the first failing check is the problem.
        image_format < 0,
        image_format >= len(formats.SUPPORTED),
        pixels > max_pixels,
        pixels <= 0,
    ]
    problem = tf.constant(0, tf.int32)
    for index, failed in reversed(list(enumerate(checks, start=1))):
        problem = tf.where(failed, index, problem)
    return problem, image_format, height_width


@_graph_ops
def problem_detail(problem: tf.Tensor, image_format: tf.Tensor, height_width: tf.Tensor, max_pixels: int) -> tf.Tensor:
    """The readable detail (a string tensor) of a problem `inspect_image` found; '' when none."""
    decoded = ", ".join(name.upper() for name in formats.SUPPORTED)
    name = tf.gather(tf.constant([name.upper() for name in formats.NAMES] + ["?"]),
                     tf.where(image_format < 0, len(formats.NAMES), image_format))
    size = tf.strings.format("{}x{}", (height_width[1], height_width[0]))
    branches = {
        None: lambda: tf.constant(""),
        failures.NOT_AN_IMAGE: lambda: tf.constant(f"unknown file format (decoded formats: {decoded})"),
        failures.UNSUPPORTED_FORMAT: lambda: tf.strings.join(
            [name, f" is not supported (decoded formats: {decoded})"]),
        failures.TOO_MANY_PIXELS: lambda: tf.strings.join(
            [size, f" is more than max_pixels={max_pixels}"]),
        failures.CORRUPT: lambda: tf.strings.join(["invalid ", name, " header (", size, ")"]),
    }
    return tf.switch_case(problem, [branches[reason] for reason in failures.PROBLEMS])


@_graph_ops
def assert_decodable(problem: tf.Tensor, image_format: tf.Tensor, height_width: tf.Tensor,
                     max_pixels: int) -> tf.Operation | None:
    """An op that fails with '<reason code>: <detail>' when `inspect_image` found a problem."""
    reason = tf.gather(tf.constant([reason or "" for reason in failures.PROBLEMS]), problem)
    message = tf.strings.join([reason, ": ", problem_detail(problem, image_format, height_width, max_pixels)])
    return tf.debugging.Assert(tf.equal(problem, 0), [message], summarize=1)


@_graph_ops
def decode_image(data: tf.Tensor | bytes, max_pixels: int = PreprocessConfig.max_pixels, shrink_to: int | None = None,
                 resize_mode: str = "center_crop") -> tf.Tensor:
    """Decodes JPEG/PNG/GIF/BMP/WebP bytes into an upright RGB uint8 [H, W, 3] tensor.

    Checks the bytes first (`inspect_image`); see `decode_checked_image`.
    """
    problem, image_format, height_width = inspect_image(data, max_pixels)
    with tf.control_dependencies([assert_decodable(problem, image_format, height_width, max_pixels)]):
        data = tf.identity(data)
    return decode_checked_image(data, image_format, height_width, shrink_to, resize_mode)[0]


@_graph_ops
def decode_checked_image(data: tf.Tensor | bytes, image_format: tf.Tensor, height_width: tf.Tensor,
                         shrink_to: int | None = None,
                         resize_mode: str = "center_crop") -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes image bytes `inspect_image` passed; returns (upright RGB uint8 [H, W, 3], box float32 [4]).

    `image_format` and `height_width` are what `inspect_image` returned. JPEGs
    of any colour space (grayscale, CMYK) become RGB and follow their EXIF
    orientation; 16-bit PNGs are scaled to 8 bits; palettes are expanded;
    alpha is composited over white; an animated GIF gives its first frame.

    With `shrink_to` set, a JPEG much larger than needed is decoded at 1/2, 1/4
    or 1/8 scale in the DCT domain (libjpeg's shrink-on-load), keeping the side
    that `resize_mode` scales at least `shrink_to` pixels: far less work for
    the same model-sized result (see docs/benchmarks.md for speed and PSNR).

    `box` is (top, left, height, width) of the picture in decoded pixels: the
    whole decoded image, except after shrink-on-load, where libjpeg rounds a
    partial 8x8 block at the bottom and right edges up to a whole pixel. Then
    the picture spans the original size / ratio, starting at the edge that was
    top-left before the EXIF orientation turned it, so that `resize_image` can
    place its crop exactly where the full decode puts it.
    """
    data = tf.convert_to_tensor(data, tf.string)

    def jpeg() -> tuple[tf.Tensor, tf.Tensor]:
        orientation = exif_orientation(data)
        if shrink_to is None:
            image = apply_orientation(_refuse_a_scan_cut_short(data, tf.io.decode_jpeg(data, channels=3)), orientation)
            return image, _whole_box(image)
        index = jpeg_shrink_index(height_width, shrink_to, resize_mode)
        # Most photos need neither: they skip ~30 ops of scales and turns (the result is the same).
        return tf.cond(tf.logical_and(tf.equal(index, 0), tf.equal(orientation, 1)), whole,
                       lambda: scaled_or_turned(index, orientation))

    def whole() -> tuple[tf.Tensor, tf.Tensor]:
        image = _refuse_a_scan_cut_short(data, tf.io.decode_jpeg(data, channels=3))
        return image, _whole_box(image)

    def scaled_or_turned(index: tf.Tensor, orientation: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # `ratio` must be a constant: one decode op per scale, one of them runs.
        image = _refuse_a_scan_cut_short(data, tf.switch_case(index, [
            lambda ratio=ratio: tf.io.decode_jpeg(data, channels=3, ratio=ratio) for ratio in (1, 2, 4, 8)]))
        extent = tf.cast(height_width, tf.float32) / tf.gather([1.0, 2.0, 4.0, 8.0], index)
        image = apply_orientation(image, orientation)
        extent = tf.where(orientation >= 5, tf.reverse(extent, [0]), extent)  # 5-8 swap the axes.
        # Orientations that reverse an axis move the rounded-up edge to the start of it.
        reversed_axes = tf.stack([tf.reduce_any(tf.equal(orientation, [3, 4, 7, 8])),
                                  tf.reduce_any(tf.equal(orientation, [2, 3, 6, 7]))])
        origin = tf.where(reversed_axes, tf.cast(tf.shape(image)[:2], tf.float32) - extent, 0.0)
        return image, tf.concat([origin, extent], 0)

    def other() -> tuple[tf.Tensor, tf.Tensor]:
        # expand_animations=False decodes only the first frame of an animated GIF or
        # WebP: a many-frame file costs one frame of memory, like the header check assumes.
        image = tf.io.decode_image(data, channels=0, dtype=tf.uint8, expand_animations=False)
        image.set_shape([None, None, None])
        return to_rgb(image), _whole_box(image)

    image, box = tf.switch_case(tf.clip_by_value(image_format, 0, 4), [jpeg, other, other, other, other])
    image.set_shape([None, None, 3])
    return image, box


def _whole_box(image: tf.Tensor) -> tf.Tensor:
    return tf.concat([tf.zeros([2]), tf.cast(tf.shape(image)[:2], tf.float32)], 0)


# Output rows per block of the banded resampling below: 16 measured fastest of 8, 16, 24 and 32.
_BAND_ROWS = 16
# Fewer rows a block when a row is short (a very thin image): a block's weights hold about
# (rows + 2) x its inputs' count numbers, its band of pixels (rows + 2) / rows x the inputs x the
# row's length, so rows <= length / 48 keeps the weights a small part of it (a 1 x 10,000,000
# picture took 3.7 GB with 16 rows a block, against 0.34 GB for the op).
_ROW_LENGTH_PER_BAND_ROW = 48
# The largest band of rows (float32) one resize pass builds at once; a larger one goes a block at a time.
_BAND_BYTES_AT_ONCE = 64 * 2**20
# ScaleAndTranslate leaves an output pixel black when its filter weights sum to less than this.
_SMALLEST_WEIGHT_SUM = 1000.0 * float(np.finfo(np.float32).tiny)
# Fixed point, so that every sum is exact in float32 (an integer below 2 ** 24) whatever order a
# matmul kernel adds in, and the bytes do not depend on the thread count or the CPU: the first pass
# weighs 0-255 by 16-bit weights (255 * 2 ** 16 < 2 ** 24), its result is kept to 1/8 of a level,
# and the second pass weighs that by 12-bit weights (8 * 255 * 2 ** 12 < 2 ** 24).
_FIRST_WEIGHT_BITS, _BETWEEN_BITS, _SECOND_WEIGHT_BITS = 16, 3, 12


def _band_weights(input_size: tf.Tensor, output_size: tf.Tensor | int, scale: tf.Tensor, translation: tf.Tensor,
                  bits: int, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One axis of the antialiased triangle filter, in blocks of `rows` outputs.

    Returns (first input index of each block int32 [B], weights [B, rows, taps]): output o
    of block b is the weighted sum of inputs first[b] .. first[b] + taps - 1. The weights are
    ScaleAndTranslate's (kernel_type="triangle", antialias=True): output o samples the input at
    (o + 0.5 - translation) / scale, the triangle is widened by 1 / scale when shrinking, the
    weights are normalized over the inputs that exist, and an output whose sample falls outside
    the input is 0. They are whole numbers (float32) summing to exactly 2 ** bits per output.
    """
    inverse = 1.0 / scale
    kernel_scale = tf.maximum(inverse, 1.0)
    blocks = (output_size + rows - 1) // rows
    # Enough inputs for a whole block's spans: (rows - 1) / scale apart, each 2 x kernel_scale + 1 wide at most.
    taps = tf.cast(tf.math.ceil(tf.cast(rows - 1, tf.float32) * inverse + 2.0 * kernel_scale), tf.int32) + 2
    taps = tf.minimum(taps, input_size)
    outputs = tf.reshape(tf.range(blocks * rows), [blocks, rows])
    sample = (tf.cast(outputs, tf.float32) + 0.5) * inverse - inverse * translation
    first = tf.cast(tf.math.ceil(sample[:, 0] - kernel_scale - 0.5), tf.int32)
    first = tf.clip_by_value(first, 0, input_size - taps)
    source = tf.cast(first[:, None, None] + tf.range(taps), tf.float32) + 0.5
    weights = tf.maximum(0.0, 1.0 - tf.abs((source - sample[..., None]) * (1.0 / kernel_scale)))
    total = tf.reduce_sum(weights, -1, keepdims=True)
    kept = tf.logical_and(tf.logical_and(sample >= 0.0, sample <= tf.cast(input_size, tf.float32)),
                          outputs < output_size)[..., None]
    kept = tf.logical_and(kept, total >= _SMALLEST_WEIGHT_SUM)
    # Rounded as running totals, each weight the step between two: the weights sum to exactly
    # 2 ** bits (a flat image stays flat), and every partial sum is within 1/2 of its exact value,
    # so a shrink by thousands, whose weights are each below one unit, still averages its inputs
    # (rounding each weight alone made them all 0 there: the output was one edge pixel).
    running = tf.round(tf.cumsum(weights * ((2.0 ** bits) / tf.where(kept, total, 1.0)), axis=-1))
    whole = running - tf.pad(running[..., :-1], [[0, 0], [0, 0], [1, 0]])
    return first, tf.where(kept, whole, 0.0)


def _resample_rows(rows: tf.Tensor, output_size: tf.Tensor | int, scale: tf.Tensor, translation: tf.Tensor,
                   bits: int) -> tf.Tensor:
    """[input rows, N] (whole numbers) -> float32 [output_size, N] filtered along the rows, times 2 ** bits."""
    length = tf.shape(rows)[1]
    first, weights = _band_weights(tf.shape(rows)[0], output_size, scale, translation, bits,
                                   tf.clip_by_value(tf.minimum(length // _ROW_LENGTH_PER_BAND_ROW, output_size),
                                                    1, _BAND_ROWS))
    taps = tf.shape(weights)[-1]

    # Each block multiplies only the rows its outputs reach: one small matmul a block (oneDNN),
    # instead of a dense [output, input] matrix that is mostly zeros.
    def at_once() -> tf.Tensor:
        return tf.matmul(weights, tf.cast(tf.gather(rows, first[:, None] + tf.range(taps)), tf.float32))

    # A large image's band (all blocks' rows as float32: ~17 bytes a source pixel, 1.6 GiB at 100 Mpx) is
    # made a block at a time instead: the same products, so the same bytes (issue 55: a 9999x9999 PNG
    # took +1.90 GiB in the job's call, +0.46 GiB this way, and 3.7 s instead of 10.4 s).
    def by_block() -> tf.Tensor:
        def block(start_weights: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            start, block_weights = start_weights
            return tf.matmul(block_weights, tf.cast(rows[start:start + taps], tf.float32))
        return tf.map_fn(block, (first, weights), fn_output_signature=tf.TensorSpec([None, None], tf.float32),
                         parallel_iterations=1)

    band_bytes = tf.cast(tf.size(first) * taps, tf.int64) * tf.cast(length, tf.int64) * 4
    return tf.reshape(tf.cond(band_bytes > _BAND_BYTES_AT_ONCE, by_block, at_once), [-1, length])[:output_size]


def _scale_and_translate(image: tf.Tensor, height: tf.Tensor | int, width: tf.Tensor | int, scale: tf.Tensor,
                         translation: tf.Tensor) -> tf.Tensor:
    """Antialiased (triangle-filtered) resampling of uint8 [H, W, 3] to uint8 [height, width, 3].

    Output pixel (y, x) samples the input at ((y, x) + 0.5 - translation) / scale - 0.5: the
    filter of tf.image.resize(antialias=True)'s op, ScaleAndTranslate, with sub-pixel placement,
    in fixed point (within one level of the op). Done as banded matmuls, one axis at a time:
    1.6 against the op's 2.2 ms for 378x378 -> 224x224 on one core.
    """
    in_height, in_width = tf.shape(image)[0], tf.shape(image)[1]
    columns = _resample_rows(tf.reshape(image, [in_height, in_width * 3]), height, scale[0], translation[0],
                             _FIRST_WEIGHT_BITS)
    columns = tf.round(columns * 2.0 ** (_BETWEEN_BITS - _FIRST_WEIGHT_BITS))  # In 1/8 levels.
    columns = tf.reshape(tf.transpose(tf.reshape(columns, [height, in_width, 3]), [1, 0, 2]), [in_width, height * 3])
    resized = _resample_rows(columns, width, scale[1], translation[1], _SECOND_WEIGHT_BITS)  # [width, height * 3]
    # Turned back in float32 (oneDNN's transpose), where uint8 measured slower (0.19 vs 0.1 ms).
    resized = tf.transpose(tf.reshape(resized, [width, height, 3]), [1, 0, 2])
    resized = tf.round(resized * 2.0 ** -(_BETWEEN_BITS + _SECOND_WEIGHT_BITS))
    return tf.cast(tf.clip_by_value(resized, 0.0, 255.0), tf.uint8)


@_graph_ops
def area_filter_applies(height_width: tf.Tensor, image_size: int, resize_mode: str) -> tf.Tensor:
    """Whether an image of [height, width] is resized with the area filter (a bool tensor).

    When it shrinks by less than 2x (the shorter side for 'center_crop', both sides for
    'stretch'; never for 'pad'): everyday photos, ~500x375 to 224. An image at least twice the
    size keeps the antialiased triangle filter, since JPEG shrink-on-load (`jpeg_shrink_index`)
    decodes it smaller first, and the triangle smooths over the scaled decode's 8x8 block
    edges, which a box of one or two pixels shows (shrink-on-load's PSNR against a full decode
    fell from 41.8 to 28.7 dB with the area filter on 120 large photos).
    """
    sides = tf.cast(height_width, tf.float32)
    if resize_mode == "center_crop":
        sides = tf.reduce_min(sides, keepdims=True)
    elif resize_mode != "stretch":
        return tf.constant(False)
    return tf.reduce_all(tf.logical_and(sides >= image_size, sides < 2.0 * image_size))


def _area_shrink(image: tf.Tensor, start: tf.Tensor, extent: tf.Tensor, height: int, width: int) -> tf.Tensor:
    """The whole-pixel window nearest (start, extent) of uint8 [H, W, 3], area-averaged to uint8 [height, width, 3].

    Each output pixel is the mean of the input area it covers (`ResizeArea`, in float32: the same
    bytes on any thread count). The window starts on a whole pixel: a crop centred between two
    pixels moves by half an input pixel.
    """
    shape = tf.shape(image)[:2]
    length = tf.clip_by_value(tf.cast(tf.round(extent), tf.int32), 1, shape)
    first = tf.clip_by_value(tf.cast(tf.round(start), tf.int32), 0, shape - length)
    window = image[first[0]:first[0] + length[0], first[1]:first[1] + length[1]]
    # The op itself, without tf.image.resize's wrapping: ~10 ops fewer an image, the same numbers.
    resized = tf.raw_ops.ResizeArea(images=window[None], size=tf.constant([height, width]))[0]
    # An area mean of 0..255 lies within 0..255 (to float error far below a half), so rounding needs no clip.
    return tf.cast(tf.round(resized), tf.uint8)


def _triangle_center_crop(image: tf.Tensor, image_size: int, side: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
    """The square of side `side` from `start` (placed exactly) resampled to image_size (`_scale_and_translate`)."""
    scale = tf.constant(float(image_size)) / side
    # Resample only the window the filter reaches (the square plus the kernel's
    # support): the same result as the whole image, at a fraction of the cost.
    support = tf.math.ceil(tf.maximum(1.0 / scale, 1.0)) + 1.0
    shape = tf.shape(image)[:2]
    first = tf.cast(tf.maximum(tf.floor(start - support), 0.0), tf.int32)
    last = tf.minimum(tf.cast(tf.math.ceil(start + side + support), tf.int32), shape)
    window = image[first[0]:last[0], first[1]:last[1]]
    translation = (tf.cast(first, tf.float32) - start) * scale
    return _scale_and_translate(window, image_size, image_size, tf.stack([scale, scale]), translation)


@_graph_ops
def resize_image(image: tf.Tensor, image_size: int, resize_mode: str = "center_crop",
                 box: tf.Tensor | None = None, area: tf.Tensor | bool | None = None) -> tf.Tensor:
    """Resizes an RGB uint8 [H, W, 3] image to [image_size, image_size, 3].

    Modes: 'center_crop' scales the shorter side to image_size and keeps the
    central square, 'pad' scales the longer side to image_size and pads with
    black, 'stretch' scales each side independently. `box` (top, left, height,
    width; see `decode_checked_image`) is where the picture lies in the image;
    it defaults to the whole image.

    With `area` (default: `area_filter_applies` to the box), the whole-pixel
    window is averaged with the area (box) filter, `tf.image.resize`'s 'area'
    (OpenCV's INTER_AREA, what img2dataset shrinks with), at about a third of
    the triangle filter's cost; a center crop then starts on a whole pixel.
    Otherwise the antialiased triangle filter places the crop exactly, to a
    fraction of a pixel (`_scale_and_translate`).
    """
    size = tf.constant(float(image_size))
    box = _whole_box(image) if box is None else box
    origin, extent_height, extent_width = box[:2], box[2], box[3]
    area = area_filter_applies(box[2:], image_size, resize_mode) if area is None else area
    if resize_mode == "center_crop":
        side = tf.minimum(extent_height, extent_width)
        start = origin + tf.stack([extent_height - side, extent_width - side]) / 2.0
        square = tf.stack([side, side])
        result = tf.cond(area, lambda: _area_shrink(image, start, square, image_size, image_size),
                         lambda: _triangle_center_crop(image, image_size, side, start))
    elif resize_mode == "stretch":
        scale = tf.stack([size / extent_height, size / extent_width])
        result = tf.cond(area, lambda: _area_shrink(image, origin, box[2:], image_size, image_size),
                         lambda: _scale_and_translate(image, image_size, image_size, scale, -origin * scale))
    elif resize_mode == "pad":
        scale = size / tf.maximum(extent_height, extent_width)
        new_height = tf.maximum(1, tf.cast(tf.round(extent_height * scale), tf.int32))
        new_width = tf.maximum(1, tf.cast(tf.round(extent_width * scale), tf.int32))
        scaled = _scale_and_translate(image, new_height, new_width, tf.stack([scale, scale]), -origin * scale)
        result = tf.image.pad_to_bounding_box(scaled, (image_size - new_height) // 2,
                                              (image_size - new_width) // 2, image_size, image_size)
    else:
        raise ValueError(f"unknown resize_mode {resize_mode!r}")
    result.set_shape([image_size, image_size, 3])
    return result


@_graph_ops
def preprocess_checked_image(data: tf.Tensor | bytes, image_format: tf.Tensor, height_width: tf.Tensor,
                             config: PreprocessConfig = _DEFAULT_CONFIG, steps: Sequence[Step] = ()) -> tf.Tensor:
    """Image bytes `inspect_image` passed -> the model-sized RGB uint8 [S, S, 3] image training sees.

    `steps`: the user's TF steps, (name, traced function) in order (`tf_serving_input.steps`); a bad
    output fails with 'step_bad_output: <detail>' (`preprocess_stepped_image` returns it instead).
    """
    if steps:
        image, bad, detail = preprocess_stepped_image(data, image_format, height_width, config, steps)
        with tf.control_dependencies([tf.debugging.Assert(tf.logical_not(bad), [
                tf.strings.join([failures.STEP_BAD_OUTPUT, ": ", detail])], summarize=1)]):
            return tf.identity(image)
    image, box = decode_checked_image(
        data, image_format, height_width, shrink_to=config.image_size if config.jpeg_shrink_on_load else None,
        resize_mode=config.resize_mode)
    # The filter follows the header's size, not the decoded one: shrink-on-load or not, the same filter.
    area = area_filter_applies(height_width, config.image_size, config.resize_mode)
    return resize_image(image, config.image_size, config.resize_mode, box, area)


@_graph_ops
def preprocess_image(data: tf.Tensor | bytes, config: PreprocessConfig = _DEFAULT_CONFIG,
                     steps: Sequence[Step] = ()) -> tf.Tensor:
    """Raw encoded bytes -> the model-sized RGB uint8 [S, S, 3] image that training sees.

    Bytes that are no decodable image fail with '<reason code>: <detail>'. `steps`: see
    `preprocess_checked_image`.
    """
    problem, image_format, height_width = inspect_image(data, config.max_pixels)
    with tf.control_dependencies([assert_decodable(problem, image_format, height_width, config.max_pixels)]):
        data = tf.identity(data)
    return preprocess_checked_image(data, image_format, height_width, config, steps)


# ------------------------------------------------------------------------------------------ the user's steps
@_graph_ops
def preprocess_stepped_image(data: tf.Tensor | bytes, image_format: tf.Tensor, height_width: tf.Tensor,
                             config: PreprocessConfig, steps: Sequence[Step]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """`preprocess_checked_image` with the user's TF steps: (uint8 [S, S, 3], bad output (bool), detail).

    The hook point: the steps run on the decoded, upright image (shrink-on-load may have reduced a
    large JPEG), and the resize then sizes whatever they return, with the filter its size chooses.
    """
    image, bad, detail = run_tf_steps(decode_for_steps(data, image_format, height_width, config), steps)
    return resize_stepped(image, config), bad, detail


@_graph_ops
def decode_for_steps(data: tf.Tensor | bytes, image_format: tf.Tensor, height_width: tf.Tensor,
                     config: PreprocessConfig) -> tf.Tensor:
    """The decoded, upright uint8 [H, W, 3] image the user's steps see (Python steps take it as NumPy)."""
    return decode_checked_image(
        data, image_format, height_width, shrink_to=config.image_size if config.jpeg_shrink_on_load else None,
        resize_mode=config.resize_mode)[0]


@_graph_ops
def inspect_and_decode_for_steps(data: tf.Tensor | bytes,
                                 config: PreprocessConfig) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(the image the steps see, problem index, detail) of image bytes: a problem (`failures.PROBLEMS`) gives a
    1x1 black image and its detail, "" otherwise. What the job's stepped rows, its preview and a query decode."""
    problem, image_format, height_width = inspect_image(data, config.max_pixels)
    ok = tf.equal(problem, 0)
    image = tf.cond(ok, lambda: decode_for_steps(data, image_format, height_width, config),
                    lambda: tf.zeros([1, 1, 3], tf.uint8))
    detail = tf.cond(ok, lambda: tf.constant(""),
                     lambda: problem_detail(problem, image_format, height_width, config.max_pixels))
    return image, problem, detail


@_graph_ops
def resize_stepped(image: tf.Tensor, config: PreprocessConfig) -> tf.Tensor:
    """What the steps returned, resized to the stored [S, S, 3], with the filter its own size chooses."""
    return resize_image(image, config.image_size, config.resize_mode)
