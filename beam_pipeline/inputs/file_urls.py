"""What a `file:` URL cell names (RFC 8089): a path on this machine, or why it names none.

    local_path("file:///data/caf%C3%A9%201.jpg")      -> '/data/café 1.jpg'
    local_path("file://localhost/data/a.jpg")         -> '/data/a.jpg'
    local_path("file:/data/a.jpg")                    -> '/data/a.jpg'   (RFC 8089's minimal form)
    local_path("file://nas/data/a.jpg")               -> RowFailure(remote_file_url)

Beam's filesystems read no `file://` (its local filesystem has no scheme), so the job
decodes the URL itself and reads the path like any other. Pure Python.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from tf_serving_input import failures

_FILE_SCHEME = re.compile(r"^file:", re.IGNORECASE)
# Escapes a file name cannot hold: '/' separates names, NUL ends the C string the OS is given.
_ENCODED_SLASH = re.compile(r"%2f", re.IGNORECASE)


def is_file_url(cell: str) -> bool:
    """Whether a path cell is a `file:` URL (any case; surrounding spaces allowed, as for http(s) URLs)."""
    return bool(_FILE_SCHEME.match(cell.lstrip()))


def _refused(reason: str, url: str, why: str) -> failures.RowFailure:
    return failures.RowFailure(reason, f"{url}: {why}", {"url": url})


def local_path(url: str) -> str:
    """The local path a `file:` URL names, percent-decoded (RFC 8089); raises RowFailure when it names none.

    `file:///p`, `file://localhost/p` (any case) and `file:/p` name `/p`. A host other than localhost
    is another machine's file: `remote_file_url`. A relative path (`file:a.jpg`), a query or fragment,
    an encoded '/' (%2F) or NUL (%00) name no file: `bad_url`. Escapes that are not UTF-8 give the
    name's bytes (os.fsdecode), as the file system holds them.
    """
    url = url.strip()
    rest = url[len("file:"):]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host.lower() not in ("", "localhost"):
            raise _refused(failures.REMOTE_FILE_URL, url,
                           f"names a file on the host {host!r}; only this machine's files are read (file:///path "
                           "or file://localhost/path): copy or mount it here and name its local path")
        path = slash + path
        if not path:
            raise _refused(failures.BAD_URL, url, "names no file (write file:///absolute/path)")
    elif rest.startswith("/"):
        path = rest
    else:
        raise _refused(failures.BAD_URL, url, "a file: URL names an absolute path (file:///absolute/path); "
                                              "write a relative path without 'file:'")
    for mark, escape in (("?", "%3F"), ("#", "%23")):
        if mark in path:
            raise _refused(failures.BAD_URL, url, f"a file: URL has no query or fragment: a {mark!r} in a file's "
                                                  f"name is written {escape}")
    if _ENCODED_SLASH.search(path):
        raise _refused(failures.BAD_URL, url, "an encoded '/' (%2F) cannot be part of a file's name")
    name = urllib.parse.unquote_to_bytes(path)
    if b"\x00" in name:
        raise _refused(failures.BAD_URL, url, "a NUL byte (%00) cannot be part of a file's name")
    return os.fsdecode(name)
