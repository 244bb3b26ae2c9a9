"""Near-duplicate pairs by perceptual hash, without comparing all pairs: banded hashing on a GroupByKey.

The 64 hash bits, in zigzag order of their DCT frequency (lowest, steadiest first), are read through
overlapping windows ("bands") of `band_bits` bits every `band_step` bits: with the defaults 14 and 5, 11
bands. The images of one (band index, band value) form a bucket: two hashes meet in a bucket when one of
their bands is untouched by the bits in which they differ. That is certain for pairs
within `guaranteed_distance` bits (pigeonhole over the bands that do not overlap: 3 for the defaults) and
measured beyond it (README "Quality": recall per transformation class). In each bucket the members' real
Hamming distances are computed (NumPy, every bucket of a partition in the same few array steps) and only
pairs within `max_distance` are kept: the buckets propose, the distance decides.

Why these numbers: a bucket's comparisons grow with its size squared, and a bucket holds about
N / 2**band_bits images, so the comparisons grow as bands x N**2 / 2**band_bits. Narrow bands find more
pairs at large distances but make the work quadratic at a million images (6 disjoint bands of ~11 bits:
18x the time for 10x the rows, measured); 14-bit bands keep a million images' buckets at ~60 images, and
overlapping them recovers most of the pairs narrower bands would find.

The shuffle: a `GroupByKey` on (band index, the band value's top PARTITION_BITS bits), so each band's buckets
travel in 16 partitions (176 keys with the defaults), and the worker holding a partition sorts it by band value
into its buckets. A batch of hashes sends one value per partition it touches: its members' ids, hashes and band
values as packed int64 arrays, 24 bytes a member, never pixels (a 16-hex-digit key and the hash's bits are kept
as their two's complement). Keyed by the full band value instead, one element a member and band crossed the
shuffle: 11 Python elements an image, ~75 s of Beam's per-element work for a million hashes on one core.

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


PARTITION_BITS = 4  # A band's buckets travel in 2**4 partitions, by their value's top bits (see below).


def pack_members(ids: np.ndarray, hashes: np.ndarray, values: np.ndarray) -> bytes:
    """int64 ids, uint64 hashes and int64 band values [N] -> one bytes value (what crosses the shuffle)."""
    return np.stack([ids, as_signed(hashes), values]).astype(np.int64).tobytes()


def unpack_members(chunks: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (ids, uint64 hashes, band values) of `pack_members` chunks, concatenated."""
    arrays = [np.frombuffer(chunk, dtype=np.int64).reshape(3, -1) for chunk in chunks]
    joined = np.concatenate(arrays, axis=1) if arrays else np.zeros((3, 0), np.int64)
    return joined[0], joined[1].view(np.uint64), joined[2]


class _BandPartitions(beam.DoFn):
    """A batch of (id, hash) -> ((band, partition) key, packed members) for every band and partition it holds."""

    def __init__(self, bands: list[list[int]]) -> None:
        self._bands = bands
        self._shift = max(len(bands[0]) - PARTITION_BITS, 0)

    def process(self, batch: list[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
        ids = np.array([element[0] for element in batch], dtype=np.int64)
        hashes = as_unsigned([element[1] for element in batch])
        values = band_values(hashes, self._bands)
        for band in range(len(self._bands)):
            column = values[:, band]
            partitions = column >> self._shift
            for partition in np.unique(partitions).tolist():
                members = partitions == partition
                yield (band << PARTITION_BITS) | partition, pack_members(ids[members], hashes[members],
                                                                          column[members])


PAIRS_PER_STEP = 1 << 20  # Candidate pairs compared in one NumPy step (~60 MiB of index arrays at most).


def _pairs_in_runs(labels: np.ndarray, limit: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Positions (i < j) of every pair of a sorted label array's elements with the same label, in steps of
    whole runs holding about `limit` (PAIRS_PER_STEP) pairs (one run may hold more: max_bucket bounds it)."""
    limit = limit or PAIRS_PER_STEP
    count = len(labels)
    if count < 2:
        return
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])
    sizes = np.diff(np.r_[starts, count])
    keep = sizes >= 2
    starts, sizes = starts[keep], sizes[keep]
    pairs_before = np.r_[0, np.cumsum(sizes * (sizes - 1) // 2)]
    first = 0
    while first < len(starts):
        last = max(first + 1, int(np.searchsorted(pairs_before, pairs_before[first] + limit, side="right")) - 1)
        run_starts, run_sizes = starts[first:last], sizes[first:last]
        members = _ranges(run_starts, run_sizes)
        ends = np.repeat(run_starts + run_sizes, run_sizes)
        partners = ends - members - 1  # Later members of the same run.
        left = np.repeat(members, partners)
        right = left + 1 + np.arange(len(left)) - np.repeat(np.cumsum(partners) - partners, partners)
        yield left, right
        first = last


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The concatenation of arange(start, start + size) for each run, without a Python step per run."""
    total = int(sizes.sum())
    return np.arange(total) + np.repeat(starts - (np.cumsum(sizes) - sizes), sizes)


def partition_pairs(ids: np.ndarray, hashes: np.ndarray, values: np.ndarray, band: int, max_distance: int,
                    max_bucket: int, collapse: bool = True) -> tuple[list[tuple[int, int]],
                                                                        Iterator[tuple[int, int, int]]]:
    """`bucket_pairs` over every bucket (band value) of one band's members at once, in NumPy steps.

    Returns (oversized, pairs): (band key, size) of each bucket over `max_bucket` (in distinct hashes, when
    collapsing), and an iterator over the union of `bucket_pairs(..., copies=band == 0, collapse=collapse)`
    over the buckets, made a step of at most PAIRS_PER_STEP candidates at a time (a partition's pairs are
    never all in memory at once). One Python step a bucket cost ~110 us (NumPy's call overhead on arrays of
    a few members), 20 s of a 100,000-hash run's 11 x 16,384 buckets; here the steps are per partition.
    """
    oversized, plan = _partition_plan(ids, hashes, values, band, max_bucket, collapse)
    if plan is None:
        return oversized, iter(())
    return oversized, _partition_pair_steps(*plan, max_distance)


_Plan = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _partition_plan(ids: np.ndarray, hashes: np.ndarray, values: np.ndarray, band: int, max_bucket: int,
                    collapse: bool) -> tuple[list[tuple[int, int]], _Plan | None]:
    """(oversized, (ids, hashes, bucket, first, copy, compared) sorted by bucket, hash and id) of a partition."""
    order = np.lexsort((ids, hashes, values))  # By bucket, then hash, then id: a hash's first id is its smallest.
    ids, hashes, values = ids[order], hashes[order], values[order]
    if len(ids) == 0:
        return [], None
    bucket_start = np.r_[True, values[1:] != values[:-1]]
    hash_start = bucket_start | np.r_[True, hashes[1:] != hashes[:-1]]
    bucket = np.cumsum(bucket_start) - 1  # Bucket number of each member.
    first = np.flatnonzero(hash_start)[np.cumsum(hash_start) - 1]  # Position of each member's hash's first.
    size = np.bincount(bucket)
    distinct = np.bincount(bucket, weights=hash_start).astype(np.int64)
    over = (size > max_bucket) & (distinct > max_bucket) if collapse else size > max_bucket
    over &= size >= 2  # A bucket of one image has no pair to leave out.
    bucket_values = values[bucket_start]
    oversized = [(band_key(band, value), int(n)) for value, n in
                 zip(bucket_values[over].tolist(), size[over].tolist(), strict=True)]
    # Paired to its hash's first (smallest id) at distance 0; an id given twice is not paired with itself.
    copy = np.flatnonzero(~hash_start & (band == 0 if collapse else over[bucket]) & (ids != ids[first]))
    if collapse:
        compared = np.flatnonzero(hash_start & (distinct[bucket] >= 2) & ~over[bucket])
    else:
        compared = np.flatnonzero(~over[bucket])
    return oversized, (ids, hashes, bucket, first, copy, compared)


def _partition_pair_steps(ids: np.ndarray, hashes: np.ndarray, bucket: np.ndarray, first: np.ndarray,
                          copy: np.ndarray, compared: np.ndarray, max_distance: int) -> Iterator[tuple[int, int, int]]:
    """`partition_pairs`' pairs: the copies', then the compared members' within `max_distance`, step by step."""
    for id_a, id_b, distances in _partition_pair_arrays(ids, hashes, bucket, first, copy, compared, max_distance):
        yield from zip(id_a.tolist(), id_b.tolist(), distances.tolist(), strict=True)


def _partition_pair_arrays(ids: np.ndarray, hashes: np.ndarray, bucket: np.ndarray, first: np.ndarray,
                           copy: np.ndarray, compared: np.ndarray,
                           max_distance: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The same pairs as (id_a, id_b, distance) arrays, a step of at most PAIRS_PER_STEP candidates each."""
    for at in range(0, len(copy), PAIRS_PER_STEP):
        step = copy[at:at + PAIRS_PER_STEP]
        yield ids[first[step]], ids[step], np.zeros(len(step), np.int64)
    compared_hashes, compared_ids = hashes[compared], ids[compared]
    for left, right in _pairs_in_runs(bucket[compared]):
        distances = np.bitwise_count(compared_hashes[left] ^ compared_hashes[right])
        near = np.flatnonzero(distances <= max_distance)
        id_a, id_b = compared_ids[left[near]], compared_ids[right[near]]
        yield np.minimum(id_a, id_b), np.maximum(id_a, id_b), distances[near].astype(np.int64)


def partition_forest(ids: np.ndarray, hashes: np.ndarray, values: np.ndarray, band: int, max_distance: int,
                     max_bucket: int) -> tuple[list[tuple[int, int]], list[tuple[int, int, int]]]:
    """`partition_pairs`, reduced to what the groups need: (oversized, edges) where the edges join each member of
    a connected set of pairs to the set's smallest id, (smallest, member, their hash distance).

    The groups are the connected sets of all pairs (union-find): each partition's sets are the same through
    its spanning edges, one a member, as through its every pair. A partition of thousands of near-identical
    images (crops and re-encodes of one photo: a bucket holds them all) has millions of pairs; shuffled,
    deduplicated and read back as they were, a million such images took over 20 GB and were killed, while
    the edges stay fewer than the members. The distance of an edge may exceed `max_distance`: the two are
    joined through pairs within it.
    """
    oversized, plan = _partition_plan(ids, hashes, values, band, max_bucket, collapse=True)
    if plan is None:
        return oversized, []
    sorted_ids = np.sort(ids)  # A member's position: its id's place (an id is in one bucket of a band).
    parent = np.arange(len(sorted_ids))
    for id_a, id_b, _ in _partition_pair_arrays(*plan, max_distance):
        _union(parent, np.searchsorted(sorted_ids, id_a), np.searchsorted(sorted_ids, id_b))
    roots = _roots(parent)
    joined = np.flatnonzero(roots != np.arange(len(roots)))
    hash_by_position = hashes[np.argsort(ids, kind="stable")]
    distances = hamming(hash_by_position[roots[joined]], hash_by_position[joined])
    return oversized, list(zip(sorted_ids[roots[joined]].tolist(), sorted_ids[joined].tolist(),
                               distances.tolist(), strict=True))


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Joins the sets of each pair (a[i], b[i]) in `parent` (a forest whose roots are their sets' smallest)."""
    while len(a):
        root_a, root_b = _find(parent, a), _find(parent, b)
        apart = root_a != root_b
        a, b, root_a, root_b = a[apart], b[apart], root_a[apart], root_b[apart]
        # Each larger root hangs under the smallest root it is paired with this round; the pairs whose
        # roots still differ go round again (no cycle: a root only ever hangs under a smaller one).
        np.minimum.at(parent, np.maximum(root_a, root_b), np.minimum(root_a, root_b))


def _find(parent: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The roots of `nodes`, halving the paths on the way."""
    while True:
        up = parent[nodes]
        if np.array_equal(up, nodes):
            return nodes
        parent[nodes] = parent[up]
        nodes = up


def _roots(parent: np.ndarray) -> np.ndarray:
    """Every node's root."""
    roots = parent.copy()
    while True:
        up = roots[roots]
        if np.array_equal(up, roots):
            return roots
        roots = up


class _VerifyPartition(beam.DoFn):
    """((band, partition) key, packed members) -> (id_a, id_b, distance) within the threshold, for every
    bucket (band value) of the partition, or only their spanning edges (`partition_forest`); oversized
    buckets tagged."""

    def __init__(self, max_distance: int, max_bucket: int, collapse: bool, spanning: bool = False) -> None:
        self._max_distance = max_distance
        self._max_bucket = max_bucket
        self._collapse = collapse
        self._spanning = spanning

    def process(self, element: tuple[int, Iterable[bytes]]) -> Iterator[object]:
        key, chunks = element
        ids, hashes, values = unpack_members(chunks)
        if self._spanning:
            oversized, found = partition_forest(ids, hashes, values, key >> PARTITION_BITS, self._max_distance,
                                                self._max_bucket)
        else:
            oversized, found = partition_pairs(ids, hashes, values, key >> PARTITION_BITS, self._max_distance,
                                               self._max_bucket, self._collapse)
        for bucket in oversized:
            yield beam.pvalue.TaggedOutput(OVERSIZED, bucket)
        yield from found


class FindHashPairs(beam.PTransform):
    """(id, hash) signed int64s -> distinct (id_a, id_b, distance) with id_a < id_b, distance <= max_distance.

    Also `.oversized`: (band key, size) of each bucket larger than `max_bucket` (see the module's docstring).
    `collapse_copies` (the default): images with one hash are compared as one ("Copies"), right where the pairs
    only join groups. Off where each pair is looked at on its own: the embedding signatures' candidates are
    verified one by one and counted as neighbours, so a copy must be proposed with every image, not one.
    `spanning`: where the pairs only join groups, each partition's pairs reduced to spanning edges (one a
    member: `partition_forest`), so a dataset of mass near-duplicates does not shuffle millions of pairs.
    """

    def __init__(self, max_distance: int, band_width: int, band_step: int, max_bucket: int,
                 collapse_copies: bool = True, spanning: bool = False) -> None:
        super().__init__()
        if spanning and not collapse_copies:
            raise ValueError("spanning edges only join groups: they need collapse_copies")
        self._max_distance = max_distance
        self._bands = band_bits(band_width, band_step)  # Refuses bad band settings at construction.
        self._max_bucket = max_bucket
        self._collapse = collapse_copies
        self._spanning = spanning
        self.oversized: beam.PCollection | None = None

    def expand(self, hashes: beam.PCollection) -> beam.PCollection:
        found = (hashes
                 # (id, hash)
                 | "BatchHashes" >> beam.BatchElements(min_batch_size=256, max_batch_size=4096)
                 # [(id, hash)]
                 | "BandPartitions" >> beam.ParDo(_BandPartitions(self._bands))
                 # ((band, partition) key, packed ids, hashes and band values of the batch's members there)
                 | "GroupByPartition" >> beam.GroupByKey()
                 # ((band, partition) key, [packed members])
                 | "VerifyBuckets" >> beam.ParDo(_VerifyPartition(self._max_distance, self._max_bucket,
                                                                  self._collapse, self._spanning))
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
