"""Near-duplicate pairs by perceptual hash, without comparing all pairs: banded hashing on a GroupByKey.

The 64 hash bits, in zigzag order of their DCT frequency (lowest, steadiest first), are read through
overlapping windows ("bands") of `band_bits` bits every `band_step` bits: with the defaults 14 and 5, 11
bands. Each image is keyed by (band index, band value) for every band and grouped: two hashes meet in a
bucket when one of their bands is untouched by the bits in which they differ. That is certain for pairs
within `guaranteed_distance` bits (pigeonhole over the bands that do not overlap: 3 for the defaults) and
measured beyond it (README "Quality": recall per transformation class). In each bucket the members' real
Hamming distances are computed (NumPy, one matrix) and only pairs within `max_distance` are kept: the
buckets propose, the distance decides.

Why these numbers: a bucket's comparisons grow with its size squared, and a bucket holds about
N / 2**band_bits images, so the comparisons grow as bands x N**2 / 2**band_bits. Narrow bands find more
pairs at large distances but make the work quadratic at a million images (6 disjoint bands of ~11 bits:
18x the time for 10x the rows, measured); 14-bit bands keep a million images' buckets at ~60 images, and
overlapping them recovers most of the pairs narrower bands would find.

Only (id, hash) crosses the shuffle: two signed 64-bit integers an image (Beam's integer coder holds no
more; a 16-hex-digit key and the hash's bits are kept as their two's complement), never pixels.

Huge buckets: near-constant images all hash alike (their bits are rounding noise), so the quality job
leaves them out of the banding (they are flagged, and identical ones still group by pixel digest). A
bucket with more than `max_bucket` distinct hashes anyway (a very common pattern) is not expanded into all
its pairs: only its copies pair up (below, linear), and it is counted in the summary.

Copies: images with the same 64-bit hash (exact copies, a format change, often a re-encode) are compared as
one member, named by their smallest id, and each other one is paired to that one at distance 0, once (in
band 0's bucket: copies share every band). The groups are the same as with every pair among them (they
are joined by union-find), but the pairs stay linear in the copies: a dataset holding every image 10 times
gave 10 x 10 pairs per image and bucket before, quadratic, and the pairs stage took 18 s of a 20,000-row run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam
import numpy as np

HASH_BITS = 64
OVERSIZED = "oversized"


def zigzag_bits(side: int = 8) -> list[int]:
    """The hash's bit positions (bit r*side+c is DCT coefficient (r, c)) in JPEG zigzag order, lowest first."""
    cells = [(r, c) for r in range(side) for c in range(side)]
    cells.sort(key=lambda rc: (rc[0] + rc[1], rc[0] if (rc[0] + rc[1]) % 2 else rc[1]))
    return [r * side + c for r, c in cells]


def band_bits(width: int, step: int) -> list[list[int]]:
    """The bit positions of each band: windows of `width` consecutive zigzag positions every `step`, to the end."""
    if not 1 <= width <= HASH_BITS // 2 or step < 1:  # <= 32 bits: a band key must fit a signed 64-bit integer.
        raise ValueError(f"band width must be in 1..{HASH_BITS // 2} and its step >= 1, got {width} and {step}")
    order = zigzag_bits()
    starts = list(range(0, HASH_BITS - width + 1, step))
    if starts[-1] + width < HASH_BITS:  # The last bits get a band too.
        starts.append(HASH_BITS - width)
    return [order[start:start + width] for start in starts]


def guaranteed_distance(width: int, step: int) -> int:
    """Pairs within this many bits always share a band: one less than the bands that do not overlap."""
    disjoint, end = 0, 0
    for bits in band_bits(width, step):
        start = zigzag_bits().index(bits[0])
        if start >= end:
            disjoint, end = disjoint + 1, start + width
    return disjoint - 1


def as_unsigned(values: Iterable[int] | np.ndarray) -> np.ndarray:
    """Signed 64-bit integers (as stored and shuffled) -> uint64, bits unchanged."""
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def as_signed(values: Iterable[int] | np.ndarray) -> np.ndarray:
    """uint64 -> int64, bits unchanged (what Beam's coder and Parquet's int64 hold)."""
    return np.asarray(values, dtype=np.uint64).view(np.int64)


def signed(value: int) -> int:
    """A 64-bit unsigned integer (a hex key, a hash) as its two's complement signed value."""
    return value - (1 << 64) if value >= 1 << 63 else value


def band_values(hashes: np.ndarray, bands: list[list[int]]) -> np.ndarray:
    """uint64 [N] hashes -> int64 [N, len(bands)]: each band's bits (`band_bits`) gathered into a small integer."""
    out = np.zeros((len(hashes), len(bands)), np.int64)
    for b, bits in enumerate(bands):
        for j, bit in enumerate(bits):
            out[:, b] |= ((hashes >> np.uint64(bit)) & np.uint64(1)).astype(np.int64) << j
    return out


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise Hamming distance of uint64 arrays (broadcasting)."""
    return np.bitwise_count(np.bitwise_xor(a, b)).astype(np.int64)


def band_key(band: int, value: int) -> int:
    """One integer for (band index, band value): a value holds at most 32 bits."""
    return (band << (HASH_BITS // 2)) | value


def bucket_pairs(ids: np.ndarray, hashes: np.ndarray, max_distance: int, max_bucket: int,
                 copies: bool = True, collapse: bool = True) -> Iterator[tuple[int, int, int]]:
    """The pairs (id_a < id_b, distance) of one bucket within `max_distance` (see "Copies" in the module's docstring).

    `ids`: int64 [N]; `hashes`: uint64 [N]. Images with the same hash are one member of the comparison, named by
    their smallest id (their representative); with `copies`, each other one is paired to it at distance 0.
    Distinct hashes are compared all against all unless there are more than `max_bucket` of them.
    Without `collapse`, every pair of the bucket within the distance, copies included (quadratic in them);
    over `max_bucket` members, only the copies, each to its representative.
    """
    if len(ids) < 2:
        return
    unique, inverse = np.unique(hashes, return_inverse=True)
    representative = np.full(len(unique), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(representative, inverse, ids)
    if not collapse:
        if len(ids) > max_bucket:
            yield from _copy_pairs(ids, representative[inverse])
        else:
            yield from _pairs_within(ids, hashes, max_distance)
        return
    if copies:
        yield from _copy_pairs(ids, representative[inverse])
    if 2 <= len(unique) <= max_bucket:
        yield from _pairs_within(representative, unique, max_distance)


def _copy_pairs(ids: np.ndarray, first: np.ndarray) -> Iterator[tuple[int, int, int]]:
    """(first, id, 0) for every id that is not its hash's `first` (smallest id): linear in the copies."""
    is_copy = ids != first
    for a, b in zip(first[is_copy].tolist(), ids[is_copy].tolist(), strict=True):
        yield (a, b, 0)


def _pairs_within(ids: np.ndarray, hashes: np.ndarray, max_distance: int) -> Iterator[tuple[int, int, int]]:
    """Every pair (id_a < id_b, distance) of `hashes` within `max_distance`: one distance matrix."""
    distances = hamming(hashes[:, None], hashes[None, :])
    left, right = np.nonzero(np.triu(distances <= max_distance, k=1))
    for a, b, d in zip(ids[left].tolist(), ids[right].tolist(), distances[left, right].tolist(), strict=True):
        yield (min(a, b), max(a, b), d)


def distinct_hashes(hashes: np.ndarray) -> int:
    """How many different values `hashes` holds (what a bucket compares all against all)."""
    return len(np.unique(hashes))


class _BandKeys(beam.DoFn):
    """A batch of (id, hash) -> ((band, value) as one int, (id, hash)) for every band of every hash."""

    def __init__(self, bands: list[list[int]]) -> None:
        self._bands = bands

    def process(self, batch: list[tuple[int, int]]) -> Iterator[tuple[int, tuple[int, int]]]:
        values = band_values(as_unsigned([element[1] for element in batch]), self._bands)
        for member, value_row in zip(batch, values.tolist(), strict=True):
            for band, value in enumerate(value_row):
                yield band_key(band, value), member


class _VerifyBucket(beam.DoFn):
    """(band key, [(id, hash)]) -> (id_a, id_b, distance) within the threshold; oversized buckets tagged."""

    def __init__(self, max_distance: int, max_bucket: int, collapse: bool) -> None:
        self._max_distance = max_distance
        self._max_bucket = max_bucket
        self._collapse = collapse

    def process(self, element: tuple[int, Iterable[tuple[int, int]]]) -> Iterator[object]:
        key, members = element
        members = list(members)
        if len(members) < 2:
            return
        ids = np.array([m[0] for m in members], dtype=np.int64)
        hashes = as_unsigned([m[1] for m in members])
        if len(members) > self._max_bucket and (not self._collapse or distinct_hashes(hashes) > self._max_bucket):
            yield beam.pvalue.TaggedOutput(OVERSIZED, (key, len(members)))
        # Copies meet in every band's bucket: they are paired in band 0's only, so each pair is emitted once.
        yield from bucket_pairs(ids, hashes, self._max_distance, self._max_bucket, copies=key >> 32 == 0,
                                collapse=self._collapse)


class FindHashPairs(beam.PTransform):
    """(id, hash) signed int64s -> distinct (id_a, id_b, distance) with id_a < id_b, distance <= max_distance.

    Also `.oversized`: (band key, size) of each bucket larger than `max_bucket` (see the module's docstring).
    `collapse_copies` (the default): images with one hash are compared as one ("Copies"), right where the pairs
    only join groups. Off where each pair is looked at on its own: the embedding signatures' candidates are
    verified one by one and counted as neighbours, so a copy must be proposed with every image, not one.
    """

    def __init__(self, max_distance: int, band_width: int, band_step: int, max_bucket: int,
                 collapse_copies: bool = True) -> None:
        super().__init__()
        self._max_distance = max_distance
        self._bands = band_bits(band_width, band_step)  # Refuses bad band settings at construction.
        self._max_bucket = max_bucket
        self._collapse = collapse_copies
        self.oversized: beam.PCollection | None = None

    def expand(self, hashes: beam.PCollection) -> beam.PCollection:
        found = (hashes
                 # (id, hash)
                 | "BatchHashes" >> beam.BatchElements(min_batch_size=256, max_batch_size=4096)
                 # [(id, hash)]
                 | "BandKeys" >> beam.ParDo(_BandKeys(self._bands))
                 # (band key, (id, hash))
                 | "GroupByBand" >> beam.GroupByKey()
                 # (band key, [(id, hash)])
                 | "VerifyBuckets" >> beam.ParDo(_VerifyBucket(self._max_distance, self._max_bucket, self._collapse))
                 .with_outputs(OVERSIZED, main="pairs"))
        self.oversized = found[OVERSIZED]
        # (band key, bucket size)
        return (found.pairs
                # (id_a, id_b, distance), once per band the two share
                | "DistinctPairs" >> beam.Distinct())
                # (id_a, id_b, distance)


def brute_force_pairs(ids: np.ndarray, hashes: np.ndarray, max_distance: int) -> set[tuple[int, int, int]]:
    """Every pair within `max_distance` (int64 ids, uint64 hashes), comparing all pairs: the tests' reference."""
    return set(bucket_pairs(ids, hashes, max_distance, max_bucket=len(ids) + 1))
