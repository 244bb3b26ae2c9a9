"""A job's shard read once by another job: verified, and handed over a batch at a time as it is read."""

import dataclasses
import hashlib
import json

import pytest

from beam_pipeline.common.job_shards import RecordShard, damaged_shard, verified_batches
from beam_pipeline.common.records import frame_record
from beam_pipeline.common.shard_file import seal
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


def shard_of(path, records, checksum="framing", status=None):
    """The RecordShard the job's manifest would list for `records` (size and checksums as written), and
    the job's sealed status of it (`status`: what to change in it) beside it."""
    data = framed(records)
    path.write_bytes(data)
    shard = RecordShard(name="train-00000-of-00001", split="train", path=str(path), rows=len(records),
                        file="data/train-00000-of-00001.tfrecord", bytes=len(data),
                        sha256=hashlib.sha256(data).hexdigest(),
                        framing_sha256=framing_digest(records) if checksum == "framing" else None,
                        status_path=str(path.parent / "status.json"))
    written = {"name": shard.name, "file": shard.file, "records": shard.rows, "bytes": shard.bytes,
               "sha256": shard.sha256, **({"framing_sha256": shard.framing_sha256} if shard.framing_sha256 else {})}
    (path.parent / "status.json").write_text(json.dumps(seal(dict(written, **(status or {})))))
    return shard


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


def changed_record_shard(tmp_path, **shard_of_args):
    """A shard of RECORDS whose record 4 was rewritten since (its CRCs made to match): only a checksum tells."""
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS, **shard_of_args)
    changed = list(RECORDS)
    changed[4] = b"X" + changed[4][1:]
    (tmp_path / "s.tfrecord").write_bytes(framed(changed))
    return shard, changed


@pytest.mark.parametrize("edit", ["framing digest recomputed", "SHA-256 damaged"])
def test_a_manifest_changed_since_the_status_was_sealed_is_checked_by_the_sha256(tmp_path, edit):
    """The manifest's SHA-256 names the job output: a manifest whose framing digest no longer agrees with the
    shard's sealed status (recomputed for a changed record, or its SHA-256 flipped) is not trusted for it."""
    shard, changed = changed_record_shard(tmp_path)
    if edit == "framing digest recomputed":
        shard = dataclasses.replace(shard, framing_sha256=framing_digest(changed))
    else:
        shard = dataclasses.replace(shard, sha256="0" * 64)
        (tmp_path / "s.tfrecord").write_bytes(framed(RECORDS))  # The shard itself intact.
    damage = damaged_shard(shard)
    assert isinstance(damage, failures.RowFailure) and "does not match the SHA-256" in damage.detail


@pytest.mark.parametrize("status", ["missing", "damaged", "another shard's"])
def test_without_a_status_that_agrees_a_shard_is_checked_by_the_sha256(tmp_path, status):
    shard, _ = changed_record_shard(tmp_path, status={"bytes": 1} if status == "another shard's" else None)
    if status == "missing":
        (tmp_path / "status.json").unlink()
    elif status == "damaged":
        sealed = (tmp_path / "status.json").read_text()
        (tmp_path / "status.json").write_text(sealed.replace('"records": 7', '"records": 8'))
    damage = damaged_shard(shard)
    assert isinstance(damage, failures.RowFailure) and "does not match the SHA-256" in damage.detail
    (tmp_path / "s.tfrecord").write_bytes(framed(RECORDS))
    assert damaged_shard(shard) is None  # The intact shard passes the SHA-256.


def test_an_unreadable_shard_says_why_even_when_the_error_has_no_message(tmp_path, monkeypatch):
    """A record length forged to 2^40 with a matching CRC made Python's read raise a bare MemoryError."""
    shard = shard_of(tmp_path / "s.tfrecord", RECORDS)
    from beam_pipeline.common import job_shards

    def no_memory(stream, framing=None):
        raise MemoryError()
        yield  # noqa: RET503 - a generator, as read_records is.

    monkeypatch.setattr(job_shards, "read_records", no_memory)
    damage = damaged_shard(shard)
    assert damage is not None and damage.detail.endswith("cannot be read: MemoryError")
