"""One shard file on any Beam filesystem: temporary name, framing, checksum, publishing, status, verification.

    with ShardFileWriter(layout, name) as shard:
        for record in records:
            shard.write_record(record)          # TFRecord framing (or shard.write(bytes, records=n))
        status = shard.publish({"rows": ..., "failed": [...]})

Each attempt writes under its own temporary name (`layout.temp_path` with a
random attempt id), so two attempts at one shard (a runner's retry, a
duplicate work item, a second run) never write into one file. Publishing
renames the complete file over the final name, never deleting it first: on
a local disk the rename replaces it atomically, on object stores the copy
does. Attempts write byte-identical shards, so whichever lands last is right;
an attempt that finds the shard already published with its own checksum (the
file's content checked, not just its size) keeps that one and discards its copy.
The status file (records, checksum) is published the same way, after the
data, with a checksum of its own content (`seal`): a shard counts as done only
once its status exists, verifies, and its file matches it (`read_verified`).
"""

from __future__ import annotations

import hashlib
import json
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.files import RAW as _RAW
from beam_pipeline.common.files import file_digest_or_none, new_attempt_id, read_json, write_json
from beam_pipeline.common.records import frame_record, framing_of, new_framing_digest
from tf_serving_input.layout import temp_path

if TYPE_CHECKING:
    from tf_serving_input.layout import RunFolder

STATUS_CHECKSUM = "status_sha256"  # A status file's checksum of its own content (see `seal`).


class ShardFileWriter:
    """Writes one shard's file (TFRecords, or any bytes) and publishes it and its status."""

    def __init__(self, layout: RunFolder, name: str) -> None:
        self._layout = layout
        self._name = name
        self._attempt = new_attempt_id()
        self.data_path = layout.shard_file(name)
        self.status_path = layout.status_file(name)
        self._temp_path = temp_path(self.data_path, self._attempt)
        self._file: IO[bytes] | None = None
        self._checksum = hashlib.sha256()
        self._framing: Any = new_framing_digest()  # Meaningful while every write is a framed record.
        self._only_records = True
        self.records = 0
        self.bytes = 0

    def __enter__(self) -> ShardFileWriter:
        self._file = FileSystems.create(self._temp_path, compression_type=_RAW)
        return self

    def write(self, data: bytes, records: int = 1) -> None:
        """Appends bytes that hold `records` records."""
        self._only_records = False
        self._append(data, records)

    def _append(self, data: bytes, records: int) -> None:
        assert self._file is not None, "ShardFileWriter.write outside its `with` block (or after publish)"
        self._file.write(data)
        self._checksum.update(data)
        self.records += records
        self.bytes += len(data)

    def write_record(self, record: bytes) -> None:
        """Appends one serialized record in TFRecord framing."""
        framed = frame_record(record)
        for part in framing_of(framed):
            self._framing.update(part)
        self._append(framed, 1)

    def __exit__(self, error_type: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> Literal[False]:
        if self._file is not None:
            self._file.close()
            self._file = None
        if error_type is not None:  # Leave no temporary file behind a failed attempt.
            _delete_quietly(self._temp_path)
        return False

    def publish(self, status: dict[str, Any]) -> dict[str, Any]:
        """Closes the file, publishes it under its final name, then its status; returns the status.

        `status` gets the shard's name, file, records, bytes and sha256 added, and `framing_sha256`
        (`records.new_framing_digest`) when every write was a `write_record`.
        """
        self.__exit__(None, None, None)
        status = dict(status, name=self._name, file=self._layout.relative_shard_file(self._name),
                      records=self.records, bytes=self.bytes, sha256=self._checksum.hexdigest())
        if self._only_records:
            status["framing_sha256"] = self._framing.hexdigest()
        published = read_status(self.status_path)
        if (published and published.get("sha256") == status["sha256"]
                and _size(self.data_path) == status["bytes"]
                and file_digest_or_none(self.data_path) == status["sha256"]):
            _delete_quietly(self._temp_path)  # Another attempt published this very shard: keep it.
            return published
        status = seal(status)
        FileSystems.rename([self._temp_path], [self.data_path])
        write_json(self.status_path, status)
        return status


def seal(status: dict[str, Any]) -> dict[str, Any]:
    """`status` with a checksum of its own content, so that a changed number in it is caught like a changed byte.

    A resumed run reuses what a status says (row counts, failures, the pixel moments the
    statistics are summed from): the data file's checksum alone cannot vouch for those.
    """
    return dict(status, **{STATUS_CHECKSUM: _status_digest(status)})


def _status_digest(status: dict[str, Any]) -> str:
    content = {key: value for key, value in status.items() if key != STATUS_CHECKSUM}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def read_status(status_path: str) -> dict[str, Any] | None:
    """A published status dict whose own checksum holds, or None (absent, unreadable or changed)."""
    status = read_json(status_path)
    if not isinstance(status, dict) or status.get(STATUS_CHECKSUM) != _status_digest(status):
        return None
    return status


def read_verified(layout: RunFolder, name: str, rows: int) -> tuple[dict[str, Any], bytes] | None:
    """(status, file bytes) of a shard an earlier attempt completed for these `rows`, else None.

    The file must exist with the size and SHA-256 its status records.
    """
    status = read_status(layout.status_file(name))
    if not status or status.get("rows") != rows:
        return None
    try:
        with FileSystems.open(layout.shard_file(name), compression_type=_RAW) as f:
            data = f.read()
    except Exception:  # noqa: BLE001 - no file: not complete.
        return None
    if len(data) != status.get("bytes") or hashlib.sha256(data).hexdigest() != status.get("sha256"):
        return None
    return status, data


def _size(path: str) -> int | None:
    try:
        return FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    except Exception:  # noqa: BLE001 - absent.
        return None


def _delete_quietly(path: str) -> None:
    try:
        FileSystems.delete([path])
    except Exception:  # noqa: BLE001 - already gone.
        pass
