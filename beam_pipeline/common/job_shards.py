"""A finished preprocessing job's shards as another job reads them: `RecordShard`s from its manifest, verified.

The predict and quality jobs both read a job's output: each shard is checked in one streaming pass
(size and SHA-256 against the job's manifest, every record's CRCs) before any of its rows is used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.records import DamagedRecords, Readable, read_records
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
                        bytes=shard.get("bytes"), sha256=shard.get("sha256"))
            for shard in job_manifest["shards"]]


class _HashingReader:
    """A file object's reads, counted and hashed on the way."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def read(self, size: int) -> bytes:
        data = self._stream.read(size)
        self.sha256.update(data)
        self.bytes += len(data)
        return data


def damaged_shard(shard: RecordShard) -> failures.RowFailure | None:
    """Why a job's shard cannot be trusted (a RowFailure for each of its rows), or None when it verifies.

    One streaming pass: the file's size and SHA-256 against the job's manifest, and every
    record's framing CRCs, so that a changed byte (a key, a pixel, a length) is never predicted.
    """
    return _verify(shard, None)


def verified_records(shard: RecordShard) -> tuple[list[bytes], failures.RowFailure | None]:
    """(the shard's records, None) when it verifies as `damaged_shard` does, else ([], why).

    The same one streaming pass, keeping the records: a reader that needs them all (the quality
    job) reads the file once instead of verifying it and then reading it again.
    """
    kept: list[bytes] = []
    damage = _verify(shard, kept)
    return ([], damage) if damage is not None else (kept, None)


def _verify(shard: RecordShard, kept: list[bytes] | None) -> failures.RowFailure | None:
    """`damaged_shard`'s pass; each record read is appended to `kept` when given."""
    where = f"job shard {shard.file or shard.path}"
    try:
        with FileSystems.open(shard.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            reader = _HashingReader(f)
            count = 0
            try:
                for record in read_records(reader):
                    count += 1
                    if kept is not None:
                        kept.append(record)
                problem = None
            except DamagedRecords as error:
                problem = f"{where} is {error}"
            while reader.read(1 << 20):
                pass  # The rest of the file still counts for its size and checksum.
    except Exception as error:  # noqa: BLE001 - Beam wraps every filesystem error in its own type.
        return failures.RowFailure(failures.INPUT_SHARD_DAMAGED, f"{where} cannot be read: {error}")
    if shard.bytes is not None and reader.bytes < shard.bytes:
        problem = f"{where} is truncated: {reader.bytes} of the {shard.bytes} bytes the job's manifest records"
    elif shard.bytes is not None and reader.bytes != shard.bytes:
        problem = f"{where} has {reader.bytes} bytes, not the {shard.bytes} the job's manifest records"
    elif shard.sha256 is not None and reader.sha256.hexdigest() != shard.sha256:
        problem = f"{where} does not match the SHA-256 in the job's manifest (a changed byte)"
    elif problem is None and count != shard.rows:
        problem = f"{where} holds {count} records, not the {shard.rows} the job's manifest records"
    if problem is None:
        return None
    return failures.RowFailure(failures.INPUT_SHARD_DAMAGED,
                               f"{problem}; rerun the preprocessing job (the same command) to rewrite it")
