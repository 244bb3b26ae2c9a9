"""A finished preprocessing job's shards as another job reads them: `RecordShard`s from its manifest, verified.

The predict and quality jobs both read a job's output: each shard is checked in one streaming pass
(size, record count and framing digest against the job's manifest, every record's CRCs; the file's SHA-256
for a shard of an earlier version's job, whose manifest has no framing digest): no row of a shard that
fails it counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.records import DamagedRecords, Readable, new_framing_digest, read_records
from beam_pipeline.common.shard_file import read_status
from tf_serving_input import failures
from tf_serving_input.layout import shard_stem

if TYPE_CHECKING:
    from tf_serving_input.layout import OutputLayout


@dataclasses.dataclass(frozen=True)
class RecordShard:
    """An input shard of the preprocessing job: its output name, split, file, record count and checksum."""

    name: str
    split: str
    path: str
    rows: int
    file: str = ""  # As the job's manifest names it (relative to the job's folder), for messages.
    bytes: int | None = None
    sha256: str | None = None
    framing_sha256: str | None = None  # `records.new_framing_digest`; absent from an earlier version's manifest.
    status_path: str = ""  # The job's sealed status of the shard, to agree with the manifest (`_framing_to_check`).


def job_input_sha256(job_manifest: dict[str, Any]) -> str:
    """One SHA-256 over a job output's shards' names and checksums: what its images are, wherever the folder is."""
    shards = [(shard["file"], shard.get("sha256")) for shard in job_manifest["shards"]]
    return hashlib.sha256(json.dumps(shards).encode()).hexdigest()


def job_dataset_id(job_manifest: dict[str, Any]) -> str:
    """The dataset id the predict job records for a job output (its table rows, its manifest's "dataset")."""
    return hashlib.sha256(f"job\0{job_input_sha256(job_manifest)}".encode()).hexdigest()[:16]


def record_shards(job_layout: OutputLayout, job_manifest: dict[str, Any]) -> list[RecordShard]:
    """The RecordShards of a job's output, from its manifest."""
    return [RecordShard(name=shard_stem(shard["file"]), split=shard["split"],
                        path=job_layout.path(shard["file"]), rows=shard["records"], file=shard["file"],
                        bytes=shard.get("bytes"), sha256=shard.get("sha256"),
                        framing_sha256=shard.get("framing_sha256"),
                        status_path=job_layout.status_file(shard_stem(shard["file"])))
            for shard in job_manifest["shards"]]


def _framing_to_check(shard: RecordShard) -> str | None:
    """The shard's framing digest to check, or None: check the file's SHA-256 against the manifest instead.

    The manifest's SHA-256 is what names the job output (`job_input_sha256`) but is not what a reader
    checks when it has the framing digest, so the two are tied: the shard's status file (sealed with a
    checksum of its own content, written with the shard) must record the same records, bytes, SHA-256
    and framing digest as the manifest. A status that is missing (a folder copied without `shards/`),
    damaged, or that disagrees (a manifest edited or damaged since) falls back to the SHA-256 of every
    byte. Read here, in the worker, not by the launcher: a million images' thousand status files on an
    object store would take it a minute one by one.
    """
    if not isinstance(shard.framing_sha256, str) or not shard.status_path:
        return None
    status = read_status(shard.status_path)
    recorded = {"file": shard.file, "records": shard.rows, "bytes": shard.bytes, "sha256": shard.sha256,
                "framing_sha256": shard.framing_sha256}
    same = status is not None and all(status.get(key) == value for key, value in recorded.items())
    return shard.framing_sha256 if same else None


class _CountingReader:
    """A file object's reads, counted, and hashed on the way when `sha256` is given."""

    def __init__(self, stream: Readable, sha256: Any = None) -> None:
        self._stream = stream
        self.sha256 = sha256
        self.bytes = 0

    def read(self, size: int) -> bytes:
        data = self._stream.read(size)
        if self.sha256 is not None:
            self.sha256.update(data)
        self.bytes += len(data)
        return data


def damaged_shard(shard: RecordShard) -> failures.RowFailure | None:
    """Why a job's shard cannot be trusted (a RowFailure for each of its rows), or None when it verifies.

    One streaming pass: the file's size, record count and framing digest against the job's manifest
    (the file's SHA-256 where it has no framing digest), and every record's CRCs, so that a changed
    byte (a key, a pixel, a length) is never predicted.
    """
    return _verify(shard)


def verified_batches(shard: RecordShard, size: int,
                     consume: Callable[[list[bytes]], None]) -> failures.RowFailure | None:
    """`damaged_shard`'s one pass, handing the records to `consume` `size` at a time as they are read.

    A reader that needs every record (the quality job) reads the file once instead of verifying it
    and then reading it again, and uses each batch while its bytes are still in the cache (9% faster
    than keeping the shard and using it after the pass, and one batch in memory, not the shard).
    The verdict comes at the end: when it is a RowFailure, drop whatever `consume` made of the batches.
    """
    return _verify(shard, size, consume)


def _verify(shard: RecordShard, size: int = 1,
            consume: Callable[[list[bytes]], None] | None = None) -> failures.RowFailure | None:
    """`damaged_shard`'s pass; the records read go to `consume`, `size` at a time, when it is given.

    When `consume` raises, the pass still ends: a damaged shard (a changed record can fail its
    consumer before the checksum at the end says why) returns its RowFailure; an intact one re-raises.
    """
    where = f"job shard {shard.file or shard.path}"
    consumer_error: Exception | None = None

    def hand(batch: list[bytes]) -> None:
        nonlocal consumer_error
        if consume is not None and consumer_error is None:
            try:
                consume(batch)
            except Exception as error:  # noqa: BLE001 - re-raised below unless the shard explains it.
                consumer_error = error

    try:
        with FileSystems.open(shard.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            # Either digest covers every byte; the framing one with 16 bytes a record to hash, not the file.
            expected_framing = _framing_to_check(shard)
            framing = new_framing_digest() if expected_framing is not None else None
            reader = _CountingReader(f, sha256=hashlib.sha256() if framing is None else None)
            count = 0
            batch: list[bytes] = []
            try:
                for record in read_records(reader, framing=framing):
                    count += 1
                    if consume is not None:
                        batch.append(record)
                        if len(batch) == size:
                            hand(batch)
                            batch = []
                if batch:
                    hand(batch)
                problem = None
            except DamagedRecords as error:
                problem = f"{where} is {error}"
            while reader.read(1 << 20):
                pass  # The rest of the file still counts for its size and checksum.
    except Exception as error:  # noqa: BLE001 - Beam wraps every filesystem error in its own type.
        why = str(error) or type(error).__name__  # A MemoryError (a forged length of 2^40) says nothing.
        return failures.RowFailure(failures.INPUT_SHARD_DAMAGED, f"{where} cannot be read: {why}")
    if shard.bytes is not None and reader.bytes < shard.bytes:
        problem = f"{where} is truncated: {reader.bytes} of the {shard.bytes} bytes the job's manifest records"
    elif shard.bytes is not None and reader.bytes != shard.bytes:
        problem = f"{where} has {reader.bytes} bytes, not the {shard.bytes} the job's manifest records"
    elif framing is not None and problem is None and framing.hexdigest() != expected_framing:
        problem = (f"{where} does not match the record checksums in the job's manifest (a changed, "
                   "added, dropped or reordered record)")
    elif framing is None and shard.sha256 is not None and reader.sha256.hexdigest() != shard.sha256:
        problem = f"{where} does not match the SHA-256 in the job's manifest (a changed byte)"
    elif problem is None and count != shard.rows:
        problem = f"{where} holds {count} records, not the {shard.rows} the job's manifest records"
    if problem is None:
        if consumer_error is not None:
            raise consumer_error  # The consumer's own failure on an intact shard.
        return None
    return failures.RowFailure(failures.INPUT_SHARD_DAMAGED,
                               f"{problem}; rerun the preprocessing job (the same command) to rewrite it")
