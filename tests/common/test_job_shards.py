"""A job's shard read once by another job: verified, and handed over a batch at a time as it is read."""

import hashlib

import pytest

from beam_pipeline.common.job_shards import RecordShard, damaged_shard, verified_batches
from beam_pipeline.common.records import frame_record
from tf_serving_input import failures

RECORDS = [f"record {i}".encode() * (i + 1) for i in range(7)]


def shard_of(path, data, records=len(RECORDS)):
    """The RecordShard the job's manifest would list for `data` (its size and SHA-256 as written)."""
    path.write_bytes(data)
    return RecordShard(name="train-00000-of-00001", split="train", path=str(path), rows=records,
                       file="data/train-00000-of-00001.tfrecord", bytes=len(data),
                       sha256=hashlib.sha256(data).hexdigest())


def framed(records):
    return b"".join(frame_record(record) for record in records)


def test_every_record_comes_once_in_order_in_batches_of_the_size_asked(tmp_path):
    shard = shard_of(tmp_path / "s.tfrecord", framed(RECORDS))
    batches = []
    assert verified_batches(shard, 3, lambda batch: batches.append(list(batch))) is None
    assert [len(batch) for batch in batches] == [3, 3, 1]
    assert [record for batch in batches for record in batch] == RECORDS


def test_a_changed_record_with_a_matching_crc_is_caught_by_the_checksum_after_its_batch_was_used(tmp_path):
    shard = shard_of(tmp_path / "s.tfrecord", framed(RECORDS))
    changed = list(RECORDS)
    changed[4] = b"X" + changed[4][1:]  # Reframed: its CRC matches, only the SHA-256 can tell.
    (tmp_path / "s.tfrecord").write_bytes(framed(changed))
    used = []
    damage = verified_batches(shard, 2, used.extend)
    assert changed[4] in used  # Handed over before the verdict: the caller drops what it made of it.
    assert isinstance(damage, failures.RowFailure) and damage.reason == failures.INPUT_SHARD_DAMAGED
    assert "does not match the SHA-256" in damage.detail and shard.file in damage.detail
    assert damaged_shard(shard).detail == damage.detail


def test_a_consumer_that_fails_on_a_damaged_shard_gets_the_shards_damage_not_its_own_error(tmp_path):
    """A changed record can fail its consumer (a parse error) before the checksum at the end says why."""
    shard = shard_of(tmp_path / "s.tfrecord", framed(RECORDS))
    changed = list(RECORDS)
    changed[1] = b"unparseable".ljust(len(RECORDS[1]), b"!")  # The same size: only the SHA-256 tells.
    (tmp_path / "s.tfrecord").write_bytes(framed(changed))

    def consume(batch):
        if changed[1] in batch:
            raise ValueError("cannot parse a record")

    damage = verified_batches(shard, 2, consume)
    assert isinstance(damage, failures.RowFailure) and "does not match the SHA-256" in damage.detail


def test_a_consumer_that_fails_on_an_intact_shard_raises_its_own_error(tmp_path):
    shard = shard_of(tmp_path / "s.tfrecord", framed(RECORDS))
    seen = []

    def consume(batch):
        seen.append(len(batch))
        raise ValueError("the consumer's own bug")

    with pytest.raises(ValueError, match="the consumer's own bug"):
        verified_batches(shard, 2, consume)
    assert seen == [2]  # Not handed more batches after it failed.


@pytest.mark.parametrize("cut", [1, 20])
def test_a_cut_shard_is_damaged_whatever_was_handed_over(tmp_path, cut):
    data = framed(RECORDS)
    shard = shard_of(tmp_path / "s.tfrecord", data)
    (tmp_path / "s.tfrecord").write_bytes(data[:-cut])
    damage = verified_batches(shard, 4, lambda batch: None)
    assert isinstance(damage, failures.RowFailure) and "truncated" in damage.detail
