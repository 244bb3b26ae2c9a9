"""The job output's image index: one Parquet table, every stored image and every failed row, written once.

    index = image_index.open_index(OutputLayout(input_dir), manifest)   # built on first use, then read
    index.table       # COLUMNS: key, source, split, label, shard, offset, length, stored_bytes, reason, detail

A stored image's row says where its record is (shard stem, byte offset of its TFRecord header, record
length) and what the pages show (source, split, label, stored size); a failed row of errors.jsonl has no
shard and carries its reason and detail. Stored rows come first in shard and record order (the
gallery's order), then the failed rows in errors.jsonl's order.

The index is built from the shards without reading their pixels: each record's tf.train.Example is
walked in a read-only memory map, only its small features are read, and the image bytes are skipped
by length. It is written beside the run (`OutputLayout.index_file`, temporary name then rename), then
its record (`OutputLayout.index_record_file`, the same way): the index's SHA-256 and size, and what it
was built from (the SHA-256 of manifest.json and errors.jsonl, the size and mtime of every shard). A
reader trusts the index only when both agree; otherwise it says why in one line and builds it again.

Why a record of its own, not the checksum in manifest.json: the manifest is the job's (written once,
at its end, read by the predict and quality jobs and hashed by nothing else here), a read-only run
folder cannot take a rewritten manifest at all, and a record bound to the manifest's SHA-256 is stale
the moment the job rewrites its manifest, which is exactly when the index is.

A run folder that cannot be written (read-only, another user's) gets its index in a cache folder
(`$XDG_CACHE_HOME/beam-image-pipeline/index/`, one folder per run path), or in memory only when that
cannot be written either; one line says which. Local folders only (the UI serves local runs); pure
Python and pyarrow, no TensorFlow, no Beam, so the UI starts without them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from beam_pipeline.common import example_wire
from tf_serving_input import features
from tf_serving_input.layout import OutputLayout, shard_stem, temp_path

# Version of the index's columns and its record: an index of another version is built again.
INDEX_VERSION = 1
_TEXT = pa.dictionary(pa.int32(), pa.string())  # Few distinct values a column: stored and compared as ints.
SCHEMA = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", _TEXT, nullable=False),
    pa.field("label", _TEXT, nullable=False),
    pa.field("shard", _TEXT),  # The shard's stem ('train-00003-of-00016'); null for a failed row.
    pa.field("offset", pa.int64()),  # Byte offset of the record's TFRecord header in its shard.
    pa.field("length", pa.int64()),  # The record's length (its serialized tf.train.Example).
    pa.field("stored_bytes", pa.int64()),  # The stored image's bytes (the codec's feature).
    pa.field("reason", _TEXT),  # A failed row's reason code (tf_serving_input/failures.py); null when stored.
    pa.field("detail", pa.string()),
])
COLUMNS = SCHEMA.names
FAILURE_FIELDS = ("source", "key", "split", "reason", "detail")  # What errors.jsonl's rows carry.
PROGRESS_SECONDS = 5.0
CACHE_FOLDER = "beam-image-pipeline/index"


class DamagedShard(ValueError):
    """A shard whose records cannot be walked (truncated, not TFRecord, not tf.train.Example)."""


@dataclasses.dataclass(frozen=True)
class ImageIndex:
    """The index table and where it is kept: a file path, or 'memory'."""

    table: pa.Table
    where: str


def cache_folder(root: str) -> str:
    """The cache folder of the run at `root` (one per absolute path), for a run folder that cannot be written."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    name = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:16]
    return os.path.join(base, CACHE_FOLDER, name)


def open_index(layout: OutputLayout, manifest: dict[str, Any], cache_dir: str | None = None,
               say: Callable[[str], None] | None = None) -> ImageIndex:
    """The run's index: read when its record vouches for it, else built and written (one line says so).

    Looked for beside the run, then in `cache_dir` (default: `cache_folder(layout.root)`). `say` gets
    the notices (default: `terminal.notice`, to stderr): one line when the index is built, saying why
    and where it goes, and a progress line every few seconds of a long build. DamagedShard when a
    shard cannot be walked.
    """
    if say is None:
        from beam_pipeline.common.terminal import notice

        say = notice
    cache = cache_dir or cache_folder(layout.root)
    source = _source_identity(layout, manifest)
    beside = (layout.index_file, layout.index_record_file)
    cached = (os.path.join(cache, OutputLayout.INDEX_FILE), os.path.join(cache, OutputLayout.INDEX_RECORD_FILE))
    problems = []
    for index_path, record_path in (beside, cached):
        table, problem = _read_trusted(index_path, record_path, source)
        if table is not None:
            return ImageIndex(table, index_path)
        if problem:
            problems.append(problem)
    why = f"{problems[0]}: building it again" if problems else f"{layout.root} has no image index yet: building it once"
    unwritable = _cannot_write(layout.root)
    place: tuple[str, str] | None
    if unwritable is None:
        place, where = beside, f"into {layout.index_file}"
    else:
        cache_problem = _cannot_write(cache, make=True)
        place = cached if cache_problem is None else None
        where = (f"{layout.root} cannot be written ({unwritable}), so into the cache folder {cache}"
                 if cache_problem is None else
                 f"{layout.root} cannot be written ({unwritable}), nor the cache folder {cache} ({cache_problem}), "
                 "so in memory only (built again at each start)")
    say(f"index: {why}; {where} (each record's place and labels, not its pixels)")
    table = build_table(layout, manifest, say)
    if place is None:
        return ImageIndex(table, "memory")
    _write(place[0], place[1], _parquet_bytes(table), source)
    return ImageIndex(table, place[0])


def write_index(layout: OutputLayout, table: pa.Table) -> None:
    """Writes `table` as the run's index beside it, vouched for by its record (a benchmark's generated index)."""
    _write(layout.index_file, layout.index_record_file, _parquet_bytes(table.cast(SCHEMA)),
           _source_identity(layout, layout.load_manifest()))


def _cannot_write(folder: str, make: bool = False) -> str | None:
    """Why a file cannot be created in `folder` (a read-only mount, permissions, a full disk), or None.

    Tried with a real file, not `os.access`: root passes every permission check, and a read-only
    mount answers only to a write."""
    try:
        if make:
            os.makedirs(folder, exist_ok=True)
        probe = temp_path(os.path.join(folder, OutputLayout.INDEX_FILE), uuid.uuid4().hex[:12])
        with open(probe, "xb"):
            pass
        os.unlink(probe)
    except OSError as error:
        return error.strerror or str(error)
    return None


def _source_identity(layout: OutputLayout, manifest: dict[str, Any]) -> dict[str, Any]:
    """What an index is built from: manifest.json's and errors.jsonl's SHA-256, each shard's size and mtime.

    A rerun of the job rewrites the manifest; a shard replaced in place (copied over, edited) changes its
    size or mtime: either way the index no longer describes the run and is built again.
    """
    shards = []
    for shard in manifest["shards"]:
        try:
            stat = os.stat(layout.path(shard["file"]))
            shards.append([shard["file"], stat.st_size, stat.st_mtime_ns])
        except OSError:
            shards.append([shard["file"], None, None])
    return {"version": INDEX_VERSION, "manifest_sha256": _file_sha256(layout.manifest_file),
            "errors_sha256": _file_sha256(layout.errors_file),
            "shards_sha256": hashlib.sha256(json.dumps(shards).encode()).hexdigest()}


def _file_sha256(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def _read_trusted(index_path: str, record_path: str, source: dict[str, Any]) -> tuple[pa.Table | None, str]:
    """(the index table, '') when the record vouches for the index; else (None, why not, '' when absent)."""
    import pyarrow.parquet as pq

    try:
        with open(record_path, "rb") as f:
            record = json.loads(f.read())
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError):
        return None, f"{record_path} is damaged (not JSON)"
    if not isinstance(record, dict) or any(record.get(name) != value for name, value in source.items()):
        return None, (f"{index_path} is stale (the job's manifest, errors or shards changed since it was built, "
                      "or it is of another version)")
    try:
        with open(index_path, "rb") as f:
            data = f.read()  # Hashed and parsed from the same bytes: nothing changes between the two.
    except FileNotFoundError:
        return None, f"{index_path} is missing"
    if hashlib.sha256(data).hexdigest() != record.get("sha256"):
        return None, f"{index_path} is damaged (its SHA-256 differs from the one {record_path} records)"
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as error:  # Written wrong but hashed: as good as damaged.
        return None, f"{index_path} cannot be read ({error})"
    if table.schema != SCHEMA:
        return None, f"{index_path} has other columns than this version's"
    return table, ""


def _parquet_bytes(table: pa.Table) -> bytes:
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _write(index_path: str, record_path: str, data: bytes, source: dict[str, Any]) -> None:
    """The index, then its record, each under a temporary name renamed into place: a reader sees both
    whole or a record that does not vouch for the index (rebuilt). Two starts writing at once write
    the same bytes from the same run."""
    record = {**source, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    for path, content in ((index_path, data), (record_path, json.dumps(record, indent=1).encode())):
        temp = temp_path(path, uuid.uuid4().hex[:12])
        try:
            with open(temp, "wb") as f:
                f.write(content)
            os.replace(temp, path)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise


# ---------------------------------------------------------------------------------------------- building
def build_table(layout: OutputLayout, manifest: dict[str, Any],
                say: Callable[[str], None] = lambda line: None) -> pa.Table:
    """The index table of a job output: its shards walked (pixels skipped), then errors.jsonl's rows."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    shards = manifest["shards"]
    total = sum(int(shard.get("records", 0)) for shard in shards)
    started = last = time.monotonic()
    for done, shard in enumerate(shards, 1):
        stem = shard_stem(shard["file"])
        for key, source, label, offset, length, stored in walk_shard(layout.path(shard["file"])):
            columns["key"].append(key)
            columns["source"].append(source)
            columns["label"].append(label)
            columns["offset"].append(offset)
            columns["length"].append(length)
            columns["stored_bytes"].append(stored)
        count = len(columns["key"]) - len(columns["split"])
        columns["split"] += [shard["split"]] * count
        columns["shard"] += [stem] * count
        now = time.monotonic()
        if now - last >= PROGRESS_SECONDS:  # A long build only: a short one says nothing more.
            last = now
            say(f"index: {done}/{len(shards)} shards, {len(columns['key']):,}/{total:,} images, "
                f"{len(columns['key']) / max(now - started, 1e-6):,.0f} images/s")
    stored_rows = len(columns["key"])
    for failure in _failures(layout.errors_file):
        for name in FAILURE_FIELDS:
            columns[name].append(failure[name])
        columns["label"].append(failure["label"])
    failed_rows = len(columns["key"]) - stored_rows
    for name in ("shard", "offset", "length", "stored_bytes"):
        columns[name] += [None] * failed_rows
    columns["reason"] = [None] * stored_rows + columns["reason"]
    columns["detail"] = [None] * stored_rows + columns["detail"]
    return pa.table({name: pa.array(values, type=pa.string()).dictionary_encode()
                     if SCHEMA.field(name).type == _TEXT else pa.array(values, SCHEMA.field(name).type)
                     for name, values in columns.items()}).cast(SCHEMA)


def _failures(path: str) -> Iterator[dict[str, str]]:
    """errors.jsonl's rows (a line that is no JSON object skipped), each field as text ('' when absent)."""
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield {name: str(row.get(name) or "") for name in (*FAILURE_FIELDS, "label")}


def walk_shard(path: str) -> Iterator[tuple[str, str, str, int, int, int]]:
    """(key, source, label, record offset, record length, stored image bytes) of each record of a shard.

    The file is memory-mapped and only the Examples' small fields are touched: the image's bytes are
    skipped by their length, so a shard of raw 224 px images costs a few pages a record, not 147 KiB.
    The CRCs are not checked here: a record is checked when it is read (`records.read_records_at`).
    DamagedShard when the framing or an Example does not parse.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            offset = 0
            while offset < size:
                if offset + 12 > size:
                    raise DamagedShard(f"{path} ends inside a record header at byte {offset}")
                (length,) = struct.unpack_from("<Q", data, offset)
                if offset + 16 + length > size:
                    raise DamagedShard(f"{path} ends inside the record at byte {offset}")
                try:
                    found = _example_fields(data, offset + 12, offset + 12 + length)
                except (IndexError, ValueError) as error:
                    raise DamagedShard(f"{path}: the record at byte {offset} is no tf.train.Example ({error})") \
                        from None
                yield (found.get(features.IMAGE_KEY, ""), found.get(features.IMAGE_SOURCE, ""),
                       found.get(features.LABEL_TEXT, ""), offset, length, found.get(_IMAGE, 0))
                offset += 16 + length


def raw_pixels(record: bytes) -> bytes | None:
    """The stored pixels of a serialized record of raw storage (`image/format` 'raw', `image/raw`), or None for
    any other storage: the UI's thumbnails of a raw run then need no TensorFlow (~470 MiB of its memory).

    What raw storage is (row-major HWC uint8 under `image/raw`) is tf_serving_input/codecs.py's; named here,
    as the features above are, because that module imports TensorFlow.
    """
    fields: dict[str, tuple[int, int]] = {}
    for name, feature_start, feature_end in example_wire.feature_entries(record, 0, len(record)):
        if name in (_FORMAT_NAME, _RAW_NAME):
            span = _first_bytes(record, feature_start, feature_end)
            if span is not None:
                fields[name.decode()] = span
    if features.IMAGE_RAW not in fields or features.IMAGE_FORMAT not in fields:
        return None
    start, end = fields[features.IMAGE_FORMAT]
    if bytes(record[start:end]) != b"raw":
        return None
    start, end = fields[features.IMAGE_RAW]
    return bytes(record[start:end])


_WANTED = (features.IMAGE_KEY, features.IMAGE_SOURCE, features.LABEL_TEXT)
_FORMAT_NAME, _RAW_NAME = features.IMAGE_FORMAT.encode(), features.IMAGE_RAW.encode()
# The stored image's feature: encoded (JPEG, PNG) or raw pixels (tf_serving_input/codecs.py); a record holds
# one. Named here, not through CODECS, whose module imports TensorFlow (seconds of the UI's start).
_IMAGE_FEATURES = (features.IMAGE_ENCODED, features.IMAGE_RAW)
_IMAGE = "image"


def _first_bytes(data: Any, start: int, end: int) -> tuple[int, int] | None:
    """(start, end) of a Feature's first bytes_list value, or None when it has none."""
    for number, list_start, list_end in example_wire.fields(data, start, end):
        if number == 1:  # Feature.bytes_list
            for value_number, value_start, value_end in example_wire.fields(data, list_start, list_end):
                if value_number == 1:  # BytesList.value
                    return value_start, value_end
    return None


def _example_fields(data: Any, start: int, end: int) -> dict[str, Any]:
    """The key, source and label texts and the image's stored size of one serialized tf.train.Example."""
    found: dict[str, Any] = {}
    for raw_name, feature_start, feature_end in example_wire.feature_entries(data, start, end):
        name = raw_name.decode("utf-8", "replace")
        if name in _IMAGE_FEATURES:
            span = _first_bytes(data, feature_start, feature_end)
            found[_IMAGE] = span[1] - span[0] if span else 0
        elif name in _WANTED:
            span = _first_bytes(data, feature_start, feature_end)
            found[name] = data[span[0]:span[1]].decode("utf-8", "replace") if span else ""
    return found
