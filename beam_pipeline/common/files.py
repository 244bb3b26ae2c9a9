"""Files on any Beam filesystem (local, gs://, s3://): JSON in and out, SHA-256 digests, attempt ids, folders.

The one place JSON is read from and written to Beam's FileSystems: status files,
run fingerprints, load results and progress all go through here. Also what a
folder is on an object store (`exists`, `delete_tree`): there a folder is only a
name prefix, which Beam's `FileSystems.exists` and `delete` do not see.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tf_serving_input.layout import is_local, temp_path

RAW = CompressionTypes.UNCOMPRESSED


def _under(path: str) -> list[str]:
    """Every object under the folder `path` of an object store (its folder markers too)."""
    return [m.path for m in FileSystems.match([path.rstrip("/") + "/**"])[0].metadata_list]


def exists(path: str) -> bool:
    """Whether a file or a folder is at `path`; on an object store a folder exists when an object is under it."""
    if FileSystems.exists(path):
        return True
    return not is_local(path) and bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)


def delete_tree(paths: list[str]) -> None:
    """Deletes files and folders with everything under them, on any filesystem; what is not there is no error."""
    targets = [path for path in paths if is_local(path) and FileSystems.exists(path)]
    for path in paths:
        if not is_local(path):
            # Objects under the folder before the folder itself: a marker object 'name/' may stand for it.
            targets += sorted(_under(path), reverse=True) + ([path] if FileSystems.exists(path) else [])
    if targets:
        FileSystems.delete(targets)


def new_attempt_id() -> str:
    """A unique id for one attempt at writing a file."""
    return uuid.uuid4().hex[:12]


def read_json(path: str) -> Any:
    """A JSON file's value, or None when it is absent or cannot be read."""
    try:
        with FileSystems.open(path, compression_type=RAW) as f:
            return json.loads(f.read())
    except Exception:  # noqa: BLE001 - absent or unreadable: callers treat both as "not there".
        return None


def write_json(path: str, value: Any) -> None:
    """Writes JSON under an attempt-unique temporary name, then renames it over `path`.

    Readers never see a half-written file, and two writers never write into one file.
    """
    temp = temp_path(path, new_attempt_id())
    with FileSystems.create(temp, mime_type="application/json", compression_type=RAW) as f:
        f.write(json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"))
    FileSystems.rename([temp], [path])


def file_digest(path: str) -> str:
    """SHA-256 of a file's content; raises when it cannot be read."""
    digest = hashlib.sha256()
    with FileSystems.open(path, compression_type=RAW) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest_or_none(path: str) -> str | None:
    """SHA-256 of a file's content, or None when it cannot be read (a changed byte keeps the size)."""
    try:
        return file_digest(path)
    except Exception:  # noqa: BLE001 - absent or unreadable.
        return None


def export_sha256(model_dir: str) -> str:
    """What identifies an export's model: the SHA-256 over its graph, variables index and description."""
    from tf_serving_input.serving import INFO_FILE

    model = hashlib.sha256()
    for name in ("saved_model.pb", "variables/variables.index", INFO_FILE):
        path = FileSystems.join(model_dir, name)
        if FileSystems.exists(path):
            model.update(name.encode() + file_digest(path).encode())
    return model.hexdigest()
