"""Near-duplicate pairs by perceptual hash, without comparing all pairs: banded hashing on a GroupByKey.

The 64 hash bits are cut into `bands` bands (in zigzag order of their DCT frequency, so the steadiest,
lowest-frequency bits share bands). Two hashes within Hamming distance d < bands agree on at least one
band (pigeonhole: d flipped bits touch at most d bands), so every such pair meets in a bucket keyed by
(band index, band value); pairs further apart meet when their flips leave a band untouched (measured, see
README "Quality"). In each bucket the members' real Hamming distances are computed (NumPy, one matrix) and
only pairs within `max_distance` are kept: the buckets propose, the distance decides.

Only (id, hash) crosses the shuffle: two signed 64-bit integers an image (Beam's integer coder holds no
more; a 16-hex-digit key and the hash's bits are kept as their two's complement), never pixels.

Huge buckets: near-constant images all hash alike (their bits are rounding noise), so the quality job
leaves them out of the banding (they are flagged, and identical ones still group by pixel digest). A
bucket larger than `max_bucket` anyway (a very common pattern) is not expanded into all its pairs: only its
members with identical 64-bit hashes pair up (sorting, linear), and it is counted in the summary.
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


def band_bits(bands: int) -> list[list[int]]:
    """The bit positions of each band: consecutive runs of the zigzag order, as even in size as possible."""
    if not 2 <= bands <= HASH_BITS:  # At least 2: a band key must fit a signed 64-bit integer.
        raise ValueError(f"bands must be in 2..{HASH_BITS}, got {bands}")
    order = zigzag_bits()
    edges = np.linspace(0, HASH_BITS, bands + 1).round().astype(int)
    return [order[edges[b]:edges[b + 1]] for b in range(bands)]


def as_unsigned(values: Iterable[int] | np.ndarray) -> np.ndarray:
    """Signed 64-bit integers (as stored and shuffled) -> uint64, bits unchanged."""
    return np.asarray(values, dtype=np.int64).view(np.uint64)


def as_signed(values: Iterable[int] | np.ndarray) -> np.ndarray:
    """uint64 -> int64, bits unchanged (what Beam's coder and Parquet's int64 hold)."""
    return np.asarray(values, dtype=np.uint64).view(np.int64)


def signed(value: int) -> int:
    """A 64-bit unsigned integer (a hex key, a hash) as its two's complement signed value."""
    return value - (1 << 64) if value >= 1 << 63 else value


def band_values(hashes: np.ndarray, bands: int) -> np.ndarray:
    """uint64 [N] hashes -> int64 [N, bands]: each band's bits gathered into a small integer."""
    out = np.zeros((len(hashes), bands), np.int64)
    for b, bits in enumerate(band_bits(bands)):
        for j, bit in enumerate(bits):
            out[:, b] |= ((hashes >> np.uint64(bit)) & np.uint64(1)).astype(np.int64) << j
    return out


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise Hamming distance of uint64 arrays (broadcasting)."""
    return np.bitwise_count(np.bitwise_xor(a, b)).astype(np.int64)


def band_key(band: int, value: int) -> int:
    """One integer for (band index, band value): with >= 2 bands a value holds at most 32 bits."""
    return (band << (HASH_BITS // 2)) | value


def bucket_pairs(ids: np.ndarray, hashes: np.ndarray, max_distance: int,
                 max_bucket: int) -> Iterator[tuple[int, int, int]]:
    """The pairs (id_a < id_b, distance) of one bucket within `max_distance`; exact hashes only when oversized.

    `ids`: int64 [N]; `hashes`: uint64 [N].
    """
    if len(ids) < 2:
        return
    if len(ids) > max_bucket:  # Linear: runs of equal hashes after a sort, each member paired to its run's first.
        order = np.argsort(hashes, kind="stable")
        sorted_ids, sorted_hashes = ids[order], hashes[order]
        starts = np.r_[True, sorted_hashes[1:] != sorted_hashes[:-1]]
        first = sorted_ids[np.maximum.accumulate(np.where(starts, np.arange(len(ids)), 0))]
        for a, b in zip(first[~starts].tolist(), sorted_ids[~starts].tolist(), strict=True):
            yield (min(a, b), max(a, b), 0)
        return
    distances = hamming(hashes[:, None], hashes[None, :])
    left, right = np.nonzero(np.triu(distances <= max_distance, k=1))
    for i, j, d in zip(left.tolist(), right.tolist(), distances[left, right].tolist(), strict=True):
        a, b = int(ids[i]), int(ids[j])
        yield (min(a, b), max(a, b), d)


class _BandKeys(beam.DoFn):
    """A batch of (id, hash) -> ((band, value) as one int, (id, hash)) for every band of every hash."""

    def __init__(self, bands: int) -> None:
        self._bands = bands

    def process(self, batch: list[tuple[int, int]]) -> Iterator[tuple[int, tuple[int, int]]]:
        values = band_values(as_unsigned([element[1] for element in batch]), self._bands)
        for member, value_row in zip(batch, values.tolist(), strict=True):
            for band, value in enumerate(value_row):
                yield band_key(band, value), member


class _VerifyBucket(beam.DoFn):
    """(band key, [(id, hash)]) -> (id_a, id_b, distance) within the threshold; oversized buckets tagged."""

    def __init__(self, max_distance: int, max_bucket: int) -> None:
        self._max_distance = max_distance
        self._max_bucket = max_bucket

    def process(self, element: tuple[int, Iterable[tuple[int, int]]]) -> Iterator[object]:
        key, members = element
        members = list(members)
        if len(members) > self._max_bucket:
            yield beam.pvalue.TaggedOutput(OVERSIZED, (key, len(members)))
        ids = np.array([m[0] for m in members], dtype=np.int64)
        hashes = as_unsigned([m[1] for m in members])
        yield from bucket_pairs(ids, hashes, self._max_distance, self._max_bucket)


class FindHashPairs(beam.PTransform):
    """(id, hash) signed int64s -> distinct (id_a, id_b, distance) with id_a < id_b, distance <= max_distance.

    Also `.oversized`: (band key, size) of each bucket larger than `max_bucket` (see the module's docstring).
    """

    def __init__(self, max_distance: int, bands: int, max_bucket: int) -> None:
        super().__init__()
        band_bits(bands)  # Refuses a bad band count at construction.
        self._max_distance = max_distance
        self._bands = bands
        self._max_bucket = max_bucket
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
                 | "VerifyBuckets" >> beam.ParDo(_VerifyBucket(self._max_distance, self._max_bucket))
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
