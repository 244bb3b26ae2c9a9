"""A local path that names no file, and the file it almost names: stray spaces, or another Unicode form.

    near_match("/data/ a.jpg")         -> ('/data/a.jpg', 'surrounding spaces removed')
    near_match("/data/cafe\u0301.jpg")  -> ('/data/caf\u00e9.jpg', 'the name in Unicode NFC')  (an NFC-named file)

Only asked after a read found nothing (file_not_found): a few stat calls, never a folder's listing,
so a folder of a million files costs no more than one of ten. The near match is named, never read:
which file a row means is the CSV's to say. Pure Python.
"""

from __future__ import annotations

import os
import re
import unicodedata

# An absolute path written after spaces (' /data/a.jpg') resolves against the CSV's folder: '/csv/ /data/a.jpg'.
_ABSOLUTE_AFTER_SPACES = re.compile(r"/\s+(?=/)")
_SURROGATE = re.compile("[\udc80-\udcff]")


def _variants(name: str) -> list[tuple[str, set[str]]]:
    """(variant, what changed) of one name on a path, the name itself first."""
    stripped = name.strip()
    bases = [(name, set[str]())] + ([(stripped, {"surrounding spaces removed"})] if stripped != name else [])
    found = list(bases)
    for base, changes in bases:
        if base.isascii():
            continue  # The usual name: no other Unicode form.
        for form in ("NFC", "NFD"):
            text = unicodedata.normalize(form, base)
            if all(text != seen for seen, _ in found):
                found.append((text, changes | {f"the name in Unicode {form}"}))
    return found


def _walk(path: str) -> tuple[str, set[str]] | None:
    """The existing path reached name by name, each name as written or its first variant that exists."""
    current, changes, rest = "/", set[str](), path
    folder, _, last = path.rpartition("/")
    if folder and os.path.isdir(folder):  # The usual miss: only the file's own name is tried (a few stats).
        current, rest = folder, last
    for name in rest.split("/"):
        if not name:
            continue
        for variant, change in _variants(name):
            candidate = os.path.join(current, variant) if variant else current  # A blank name: no name.
            if os.path.exists(candidate):
                current, changes = candidate, changes | change
                break
        else:
            return None
    return current, changes


def near_match(path: str) -> tuple[str, str] | None:
    """(the existing file `path` almost names, how it differs), or None; `path` is an absolute local path."""
    if not path.startswith("/"):
        return None
    starts = [path] + [path[match.end():] for match in _ABSOLUTE_AFTER_SPACES.finditer(path)][-1:]
    for start in starts:
        found = _walk(start)
        if found is not None and found[0] != path and os.path.isfile(found[0]):
            changes = found[1] or {"surrounding spaces removed"}  # Only an absolute path's leading spaces went.
            return found[0], ", ".join(sorted(changes))
    return None


def safe_text(text: str) -> str:
    """`text` with a name's bytes that are not UTF-8 (os.fsdecode's lone surrogates) written as \\xNN: what
    JSON files and UTF-8 terminals can hold."""
    return _SURROGATE.sub(lambda match: f"\\x{ord(match.group()) - 0xDC00:02x}", text)
