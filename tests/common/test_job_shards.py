"""A job's shard read once by another job: verified, and handed over a batch at a time as it is read."""

import hashlib

import pytest

from beam_pipeline.common.job_shards import RecordShard, damaged_shard, verified_batches
from beam_pipeline.common.records import frame_record
from tf_serving_input import failures

RECORDS = [f"record {i}".encode() * (i + 1) for i in range(7)]
SAME_SIZE = [f"record {i}".encode() for i in range(7)]  # Equal lengths: reordered, the file keeps its size.

# What each kind of manifest says to check: this version's job records each shard's framing digest
# (`records.new_framing_digest`), an earlier version's only the file's SHA-256.
CHANGED = {"framing": "does not match the record checksums", "sha256": "does not match the SHA-256"}


@pytest.fixture(params=sorted(CHANGED))
def checksum(request):
    return request.param


def framing_digest(records):
    """The framing digest as its definition says, from the framed bytes the job writes."""
    digest = hashlib.sha256()
    for record in records:
        framed_record = frame_record(record)
        digest.update(framed_record[:12] + framed_record[-4:])
    return digest.hexdigest()


def shard_of(path, records, checksum="framing"):
    """The RecordShard the job's manifest would list for `records` (size and checksums as written)."""
    data = framed(records)
    path.write_bytes(data)
    return RecordShard(name="train-00000-of-00001", split="train", path=str(path), rows=len(records),
                       file="data/train-00000-of-00001.tfrecord", bytes=len(data),
                       sha256=hashlib.sha256(data).hexdigest(),
                       framing_sha256=framing_digest(records) if checksum == "framing" else None)


def framed(records):
    return b"".join(frame_record(record) for record in records)


def test_every_record_comes_once_in_order_in_batches_of_the_size_asked(tmp_path, checksum):
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS, checksum)
    batches = []
    assert verified_batches(shard, 3, lambda batch: batches.append(list(batch))) is None
    assert [len(batch) for batch in batches] == [3, 3, 1]
    assert [record for batch in batches for record in batch] == RECORDS


def test_a_changed_record_with_a_matching_crc_is_caught_by_the_checksum_after_its_batch_was_used(tmp_path, checksum):
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS, checksum)
    changed = list(RECORDS)
    changed[4] = b"X" + changed[4][1:]  # Reframed: its CRC matches its bytes, only the manifest can tell.
    (tmp_path / "s.tfrecord").write_bytes(framed(changed))
    used = []
    damage = verified_batches(shard, 2, used.extend)
    assert changed[4] in used  # Handed over before the verdict: the caller drops what it made of it.
    assert isinstance(damage, failures.RowFailure) and damage.reason == failures.INPUT_SHARD_DAMAGED
    assert CHANGED[checksum] in damage.detail and shard.file in damage.detail
    assert damaged_shard(shard).detail == damage.detail


@pytest.mark.parametrize("change", ["reordered", "another shard"])
def test_records_reordered_or_another_shard_of_the_same_size_and_count_are_caught(tmp_path, checksum, change):
    """Every CRC holds, and the size and the record count are the manifest's: only its checksum can tell."""
    shard = shard_of(tmp_path / "s.tfrecord", SAME_SIZE, checksum)
    other = [record.upper() for record in SAME_SIZE]
    (tmp_path / "s.tfrecord").write_bytes(framed(SAME_SIZE[::-1] if change == "reordered" else other))
    assert len(framed(other)) == shard.bytes
    damage = damaged_shard(shard)
    assert isinstance(damage, failures.RowFailure) and CHANGED[checksum] in damage.detail


def test_a_consumer_that_fails_on_a_damaged_shard_gets_the_shards_damage_not_its_own_error(tmp_path, checksum):
    """A changed record can fail its consumer (a parse error) before the checksum at the end says why."""
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS, checksum)
    changed = list(RECORDS)
    changed[1] = b"unparseable".ljust(len(RECORDS[1]), b"!")  # The same size: only the checksum tells.
    (tmp_path / "s.tfrecord").write_bytes(framed(changed))

    def consume(batch):
        if changed[1] in batch:
            raise ValueError("cannot parse a record")

    damage = verified_batches(shard, 2, consume)
    assert isinstance(damage, failures.RowFailure) and CHANGED[checksum] in damage.detail


def test_a_consumer_that_fails_on_an_intact_shard_raises_its_own_error(tmp_path):
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS)
    seen = []

    def consume(batch):
        seen.append(len(batch))
        raise ValueError("the consumer's own bug")

    with pytest.raises(ValueError, match="the consumer's own bug"):
        verified_batches(shard, 2, consume)
    assert seen == [2]  # Not handed more batches after it failed.


@pytest.mark.parametrize("cut", [1, 20])
def test_a_cut_shard_is_damaged_whatever_was_handed_over(tmp_path, cut, checksum):
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS, checksum)
    (tmp_path / "s.tfrecord").write_bytes(framed(RECORDS)[:-cut])
    damage = verified_batches(shard, 4, lambda batch: None)
    assert isinstance(damage, failures.RowFailure) and "truncated" in damage.detail
