"""Banded pair finding against brute force, in a real Beam pipeline (TestPipeline + assert_that)."""

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_pipeline.quality import pairs


def planted_hashes(count, planted, max_flips, seed=0):
    """(ids, uint64 hashes): `count` random hashes, then `planted` copies with 0..max_flips bits flipped."""
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2**63, size=count, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, count,
                                                                                                dtype=np.uint64)
    copies = []
    for _ in range(planted):
        value = int(hashes[rng.integers(count)])
        for bit in rng.choice(64, size=rng.integers(0, max_flips + 1), replace=False):
            value ^= 1 << int(bit)
        copies.append(value)
    hashes = np.concatenate([hashes, np.array(copies, dtype=np.uint64)])
    # Ids spread over the whole signed range, as keys of 16 hex digits are.
    ids = (np.arange(len(hashes), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
    return ids, hashes


def run_find(ids, hashes, max_distance, width, step, max_bucket=10_000):
    expected = pairs.brute_force_pairs(ids, hashes, max_distance)
    with TestPipeline() as pipeline:
        found = (pipeline
                 | "Hashes" >> beam.Create(list(zip(ids.tolist(), pairs.as_signed(hashes).tolist(), strict=True)))
                 | "Find" >> pairs.FindHashPairs(max_distance, width, step, max_bucket))
        assert_that(found, equal_to(sorted(expected)))
    return expected


@pytest.mark.parametrize(("width", "step", "bands", "guaranteed"),
                         [(16, 16, 4, 3), (11, 11, 6, 4), (14, 5, 11, 3), (32, 32, 2, 1), (14, 14, 5, 3)])
def test_bands_cover_every_bit(width, step, bands, guaranteed):
    found = pairs.band_bits(width, step)
    assert len(found) == bands and all(len(band) == width for band in found)
    assert sorted({bit for band in found for bit in band}) == list(range(64))
    assert pairs.guaranteed_distance(width, step) == guaranteed


def test_band_values_round_trip_the_bits():
    hashes = np.array([0, 2**64 - 1, 0x8000000000000001, 0x0123456789ABCDEF], dtype=np.uint64)
    bands = pairs.band_bits(11, 11)
    values = pairs.band_values(hashes, bands)
    for h, row in zip(hashes.tolist(), values.tolist(), strict=True):
        rebuilt = 0
        for bits, value in zip(bands, row, strict=True):
            for j, bit in enumerate(bits):
                rebuilt |= ((value >> j) & 1) << bit
        assert rebuilt == h


@pytest.mark.parametrize(("width", "step"), [(16, 16), (11, 11), (14, 5)])
def test_pairs_equal_brute_force_within_the_guaranteed_distance(width, step):
    # Every pair within the guaranteed distance shares a band: the banded search must find exactly brute force's.
    distance = pairs.guaranteed_distance(width, step)
    ids, hashes = planted_hashes(3000, 300, max_flips=distance)
    expected = run_find(ids, hashes, distance, width, step)
    assert len(expected) >= 250  # The planted pairs are there to be found (some copies draw 0 flips).


def test_pairs_beyond_the_pigeonhole_distance_are_true_pairs_only():
    ids, hashes = planted_hashes(2000, 200, max_flips=12, seed=3)
    expected = pairs.brute_force_pairs(ids, hashes, 12)
    banded = set()
    bands = pairs.band_bits(11, 11)
    for band in range(len(bands)):  # The union over buckets, as the pipeline builds it, without Beam.
        values = pairs.band_values(hashes, bands)[:, band]
        for value in np.unique(values):
            members = values == value
            banded |= set(pairs.bucket_pairs(ids[members], hashes[members], 12, 10_000))
    assert banded <= expected
    assert len(banded) >= 0.8 * len(expected)


def test_an_oversized_bucket_pairs_only_identical_hashes():
    # 30 distinct hashes within 1 bit of each other, each held by 3 images: over max_bucket (20 distinct hashes)
    # only the copies pair, each to its first; at or under it the 30 representatives are compared too.
    base = 0x0F0F0F0F0F0F0F0F
    distinct = [base] + [base ^ (1 << bit) for bit in range(29)]
    hashes = np.array([h for h in distinct for _ in range(3)], dtype=np.uint64)
    ids = np.arange(90, dtype=np.int64)
    found = set(pairs.bucket_pairs(ids, hashes, 4, max_bucket=20))
    assert found == {(first, first + k, 0) for first in range(0, 90, 3) for k in (1, 2)}
    compared = set(pairs.bucket_pairs(ids, hashes, 4, max_bucket=30))
    assert compared - found == {(a, b, 1 if a == 0 else 2) for a in range(0, 90, 3) for b in range(a + 3, 90, 3)}


def test_copies_of_a_hash_pair_once_each_with_the_first_through_the_pipeline():
    # 150 hashes (20 near pairs among them), each held by 10 images: 9 pairs a hash (linear), not 45 (every
    # pair among them), each with the smallest id of its hash; near pairs are between those representatives.
    rng = np.random.default_rng(7)
    distinct = rng.integers(0, 2**63, size=130, dtype=np.uint64)
    distinct = np.concatenate([distinct, distinct[:20] ^ np.uint64(0b1001)])  # 20 near pairs, 2 bits apart.
    hashes = np.repeat(distinct, 10)
    ids = rng.permutation(len(hashes)).astype(np.int64) * 1000 - 700_000
    first = [int(ids[hashes == h].min()) for h in distinct]  # The representative of each distinct hash.
    of_hash = {int(h): n for n, h in enumerate(distinct)}
    expected = {(first[of_hash[int(h)]], int(i), 0) for h, i in zip(hashes, ids, strict=True)
                if first[of_hash[int(h)]] != i}
    assert len(expected) == 150 * 9
    expected |= {(min(first[a], first[b]), max(first[a], first[b]), d)
                 for a, b, d in pairs.brute_force_pairs(np.arange(150, dtype=np.int64), distinct, 10)}
    assert pairs.brute_force_pairs(ids, hashes, 10) == expected
    with TestPipeline() as pipeline:
        found = (pipeline
                 | "Hashes" >> beam.Create(list(zip(ids.tolist(), pairs.as_signed(hashes).tolist(), strict=True)))
                 | "Find" >> pairs.FindHashPairs(10, 14, 5, 10_000))
        assert_that(found, equal_to(sorted(expected)))
    assert len([d for _, _, d in expected if d == 2]) == 20


def test_far_pairs_through_the_pipeline_are_a_subset_of_brute_force():
    ids, hashes = planted_hashes(2000, 200, max_flips=10, seed=5)
    expected = pairs.brute_force_pairs(ids, hashes, 10)
    with TestPipeline() as pipeline:
        found = (pipeline
                 | "Hashes" >> beam.Create(list(zip(ids.tolist(), pairs.as_signed(hashes).tolist(), strict=True)))
                 | "Find" >> pairs.FindHashPairs(10, 14, 5, 10_000))

        def check(actual):
            actual = set(actual)
            assert actual <= expected, actual - expected
            assert len(actual) >= 0.5 * len(expected)

        assert_that(found, check)


def test_identical_embeddings_are_all_neighbours_and_a_mislabelled_copy_is_suspected(tmp_path):
    # Five images with one embedding (so one signature), four 'dog' and one 'cat': the embedding path verifies
    # each candidate and counts neighbours, so every pair must be proposed (not each copy to one representative);
    # the 'cat' then has 4 'dog' neighbours and is a suspected label error. Through the quality job's own
    # pipeline (no job shard), on a predictions shard as the predict job writes its columns.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline.quality import embedding_pairs
    from beam_pipeline.quality.findings import read_pairs
    from beam_pipeline.quality.pipeline import build_quality_pipeline
    from tf_serving_input.layout import QualityLayout

    keys = [f"{i:016x}" for i in range(1, 6)]
    labels = ["dog", "cat", "dog", "dog", "dog"]
    vector = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    embeddings = np.tile(vector / np.linalg.norm(vector), (5, 1))
    shard = str(tmp_path / "predictions.parquet")
    pq.write_table(pa.table({"key": keys, "label": labels, "embedding": pa.FixedSizeListArray.from_arrays(
        pa.array(embeddings.ravel()), 16)}), shard)
    layout = QualityLayout(str(tmp_path / "quality"))
    with TestPipeline() as pipeline:
        build_quality_pipeline(pipeline, layout, {}, [], 10, 14, 5, 2000, 4.0, [shard], 16)
    candidates = read_pairs(layout, layout.embedding_pairs_prefix + "*")
    assert {(a, b) for a, b, _ in candidates} == {(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]}
    neighbours = embedding_pairs.verified_neighbours([(a, b) for a, b, _ in candidates], [shard], 0.15)
    suspects = embedding_pairs.suspected_label_errors(neighbours, dict(zip(keys, labels, strict=True)))
    assert [(s["key"], s["label"], s["neighbour_label"]) for s in suspects] == [(keys[1], "cat", "dog")]


def test_no_embedding_candidates_verify_to_no_neighbours(tmp_path):
    # Every embedding far from the others: no candidate pair, and the verification must say so, not fail.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from beam_pipeline.quality import embedding_pairs

    shard = str(tmp_path / "predictions.parquet")
    embedding = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(4, np.float32) / 2), 4)
    pq.write_table(pa.table({"key": ["0000000000000001"], "label": ["dog"], "embedding": embedding}), shard)
    assert embedding_pairs.verified_neighbours([], [shard], 0.15) == []


@pytest.mark.parametrize("collapse", [True, False])
@pytest.mark.parametrize("band", [0, 3])
def test_a_partition_in_numpy_steps_equals_bucket_pairs_bucket_by_bucket(band, collapse):
    """partition_pairs (what the pipeline runs) against bucket_pairs (the reference) on every bucket of a
    partition: copies, near hashes, single-member buckets and buckets over max_bucket."""
    rng = np.random.default_rng(11 + band)
    values = rng.integers(0, 40, 3000)  # ~75 members a bucket: several over max_bucket below.
    hashes = rng.integers(0, 2**63, 3000, dtype=np.uint64)
    hashes[1000:1600] = hashes[rng.integers(0, 1000, 600)]  # Copies (some in other buckets than their source).
    hashes[2000:2400] = hashes[rng.integers(0, 1000, 400)] ^ (np.uint64(1) << rng.integers(0, 64, 400).astype(
        np.uint64))  # Near hashes, one bit apart.
    values[2000:2400] = values[rng.integers(0, 1000, 400)]
    values[2400:] = rng.integers(1000, 4000, 600)  # Mostly buckets of one member.
    values[:300] = 7  # One large bucket: 300+ members, over max_bucket in members and in distinct hashes.
    ids = rng.permutation(3000).astype(np.int64) * 7919 - 10_000_000
    oversized, found = pairs.partition_pairs(ids, hashes, values, band, 30, 120, collapse)
    found = list(found)
    expected, expected_oversized = [], []
    for value in np.unique(values):
        members = values == value
        expected += pairs.bucket_pairs(ids[members], hashes[members], 30, 120, copies=band == 0, collapse=collapse)
        n, distinct = int(members.sum()), len(np.unique(hashes[members]))
        if n > 120 and (not collapse or distinct > 120):
            expected_oversized.append((pairs.band_key(band, int(value)), n))
    assert sorted(found) == sorted(expected)
    assert sorted(oversized) == sorted(expected_oversized) and expected_oversized
    assert len(found) == len(set(found)) and any(d > 0 for _, _, d in found)
    # Copies pair at 0 in band 0's buckets only (collapsed), or in buckets over max_bucket (not collapsed).
    assert any(d == 0 for _, _, d in found) == (band == 0 or not collapse)


def test_pairs_of_runs_come_in_steps_of_whole_runs_and_miss_none():
    labels = np.repeat(np.arange(40), np.random.default_rng(2).integers(1, 30, 40))
    steps = list(pairs._pairs_in_runs(labels, limit=50))
    assert len(steps) > 5  # Cut into steps of about 50 pairs: whole runs each.
    got = [(int(i), int(j)) for left, right in steps for i, j in zip(left, right, strict=True)]
    expected = [(i, j) for i in range(len(labels)) for j in range(i + 1, len(labels)) if labels[i] == labels[j]]
    assert sorted(got) == expected and len(got) == len(set(got))


@pytest.mark.parametrize("collapse", [True, False])
def test_an_id_given_twice_is_never_paired_with_itself(collapse):
    """Found by a hostile trial: the same (id, hash) twice made a copy pair (3, 3, 0); bucket_pairs makes none."""
    with TestPipeline() as pipeline:
        found = (pipeline
                 | "Hashes" >> beam.Create([(3, 5), (3, 5), (4, 5)])
                 | "Find" >> pairs.FindHashPairs(2, 14, 5, 2, collapse_copies=collapse))
        assert_that(found, equal_to([(3, 4, 0)]))


def test_a_partition_yields_its_pairs_a_step_at_a_time(monkeypatch):
    """A partition of copy clusters near max_bucket holds millions of pairs: never all built at once."""
    monkeypatch.setattr(pairs, "PAIRS_PER_STEP", 10)
    hashes = np.repeat(np.arange(3, dtype=np.uint64), 60)  # Three clusters of 60 copies: 3 x 1,770 pairs.
    ids = np.arange(180, dtype=np.int64)
    oversized, found = pairs.partition_pairs(ids, hashes, np.zeros(180, np.int64), 1, 4, 2000, collapse=False)
    assert oversized == [] and not isinstance(found, list)
    first = [next(found) for _ in range(10)]
    assert len(set(first)) == 10
    assert sorted(first + list(found)) == sorted(pairs.bucket_pairs(ids, hashes, 4, 2000, collapse=False))


def test_a_signals_file_that_cannot_be_read_is_named_with_what_to_do(tmp_path):
    # The pair steps read each signals file right after its shard's status: one changed or gone since
    # (another process, an object store's late view) must name the file and the remedy, not pyarrow's bare text.
    from beam_pipeline.quality.pipeline import ReadHashes

    damaged = tmp_path / "train-00000-of-00001.parquet"
    damaged.write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(ValueError, match=rf"the signals file {damaged} cannot be read .*run the same command again"):
        list(ReadHashes(4.0).process(str(damaged)))


def _components(edges):
    """{id: the smallest id it is joined to} over (a, b, ...) edges, by plain union-find (the reference)."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b, *_ in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {x: find(x) for x in parent}


@pytest.mark.parametrize("band", [0, 3])
def test_spanning_edges_join_exactly_what_the_pairs_join_with_one_edge_a_member(band):
    """partition_forest against partition_pairs: the same connected sets, at most one edge per member, each
    edge to its set's smallest id, with the pair's true distance; on mass near-duplicates (a bucket of
    hundreds within reach of each other: millions of pairs at a million images) and on sparse buckets."""
    rng = np.random.default_rng(5 + band)
    values = rng.integers(0, 30, 4000)
    hashes = rng.integers(0, 2**63, 4000, dtype=np.uint64)
    base = hashes[0]
    flips = rng.integers(0, 64, (1500, 3)).astype(np.uint64)
    hashes[:1500] = base ^ (np.uint64(1) << flips[:, 0]) ^ (np.uint64(1) << flips[:, 1])  # One photo's crops.
    values[:1500] = 9
    hashes[1500:1900] = hashes[rng.integers(2000, 4000, 400)]  # Copies.
    ids = rng.permutation(4000).astype(np.int64) * 31 + 5
    oversized, found = pairs.partition_pairs(ids, hashes, values, band, 10, 5000)
    found = list(found)
    forest_oversized, edges = pairs.partition_forest(ids, hashes, values, band, 10, 5000)
    assert forest_oversized == oversized
    assert _components(edges) == _components(found) and len(found) > 100 * len(edges)
    members = [member for _, member, _ in edges]
    assert len(members) == len(set(members))  # One edge a member.
    reference = _components(found)
    hash_of = dict(zip(ids.tolist(), hashes.tolist()))
    for root, member, distance in edges:
        assert root == reference[member] < member
        assert distance == bin(hash_of[root] ^ hash_of[member]).count("1")


def test_spanning_edges_of_an_empty_or_pairless_partition():
    assert pairs.partition_forest(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64), 1, 10,
                                  100) == ([], [])
    ids = np.arange(5, dtype=np.int64)
    hashes = np.array([0, 2**40, 2**50, 2**60, 2**62], dtype=np.uint64) * 3
    assert pairs.partition_forest(ids, hashes, np.arange(5), 1, 2, 100)[1] == []
