"""What a command prints to a terminal: stored text made safe to show, and an exit that a closed pipe keeps quiet.

Labels and paths come from someone else's CSV. Shown raw, a label can hold an escape
sequence that rewrites the terminal, a right-to-left override that makes `cat.jpg` read
`gpj.tac`, or ten thousand characters. `shown` escapes every control, format (bidi,
zero-width) and separator character the way Python writes it (`\\u202e`) and cuts the text
to a width; the files a job writes keep the full text. Pure Python.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

# Labels are short in practice; paths get a line's worth.
LABEL_WIDTH = 60
PATH_WIDTH = 120
ELLIPSIS = "..."


def _safe(character: str) -> str:
    """A character as a terminal should show it: itself, or, if a terminal would act on it or hide it, its
    escape ('\\x1b', '\\u202e')."""
    # str.isprintable is False for the categories Cc (controls), Cf (bidi overrides, zero-width
    # characters), Cs, Co, Cn and the separators but ' ': exactly the characters to escape.
    if character.isprintable():
        return character
    code = ord(character)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escaped(text: str) -> str:
    """Stored text with every character a reader would not see as itself `_safe`, whole (no width): what the
    UI's pages show (`ui/visible.py`), the same escapes a terminal gets."""
    return text if text.isprintable() else "".join(map(_safe, text))


def shown(text: str | None, width: int = LABEL_WIDTH) -> str:
    """Stored text as one safe terminal cell: each character `_safe`, cut to at most `width` characters with
    '...', never inside an escape."""
    if text is None:
        return ""
    pieces = [_safe(c) for c in text[:width + 1]]  # Each character shows as one or more: no more can fit.
    if len(text) <= width and sum(map(len, pieces)) <= width:
        return "".join(pieces)
    room, kept = max(width - len(ELLIPSIS), 0), []
    for piece in pieces:
        if len(piece) > room:
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept) + ELLIPSIS


def _list_item(text: str, width: int) -> str:
    """One item of a `shown_list`: `shown`, and in double quotes (a quote inside as \\") when it holds a comma or
    a quote, is empty, or starts or ends with a space, so that the list reads only one way."""
    cell = shown(text, width)
    if "," in text or '"' in text or not text or text != text.strip() or text == ELLIPSIS:
        return '"' + cell.replace('"', '\\"') + '"'
    return cell


def shown_list(items: list[str], width: int = PATH_WIDTH, item_width: int = 24) -> str:
    """Stored texts (labels) as one terminal line: each `shown` within `item_width` (quoted when it holds a comma
    or a quote: `_list_item`), as many as fit in `width`, then '...'."""
    line = ""
    for i, item in enumerate(items):
        piece = (", " if i else "") + _list_item(item, item_width)
        if len(line) + len(piece) > width - len(", ..."):
            return line + (", ..." if line else ELLIPSIS)
        line += piece
    return line


def shown_counts(items: list[tuple[str, int]], width: int = PATH_WIDTH, item_width: int = 24) -> str:
    """(text, count) pairs (labels and how often each was seen) as one terminal line, `shown_list`'s way:
    `cat 3, "a, b" 2, ...`."""
    line = ""
    for i, (item, count) in enumerate(items):
        piece = (", " if i else "") + f"{_list_item(item, item_width)} {count}"
        if len(line) + len(piece) > width - len(", ..."):
            return line + (", ..." if line else ELLIPSIS)
        line += piece
    return line


def print_json(value: Any) -> None:
    """One JSON document on stdout, for programs (`--format json`): full text, non-ASCII as is."""
    result(json.dumps(value, ensure_ascii=False, default=str))


# Set when stdout was closed under a command (`... | head -1`, `| grep -q`): the command exits 141.
_stdout_closed = False


def result(text: str) -> None:
    """A command's result on stdout. A reader that closed stdout does not stop the work (a job's summary comes
    after its outputs are written, a predict run's before its load): the rest of stdout is dropped, and the
    command exits 141 at the end (`console_main`)."""
    global _stdout_closed
    if _stdout_closed:
        return
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_closed = True
        quiet_broken_pipe()


def stdout_closed() -> bool:
    """Whether a reader closed stdout under this command (see `result`)."""
    return _stdout_closed


# The status of a process killed by SIGPIPE as the shell reports it (128 + 13): what `cat` and `head` give.
BROKEN_PIPE_STATUS = 141


def quiet_broken_pipe() -> int:
    """After a BrokenPipeError on stdout (`... | head -1`): stdout to /dev/null, so the exit flush cannot fail
    again and print a traceback; returns the status to exit with."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # No stdout descriptor (embedded): nothing to silence.
        pass
    return BROKEN_PIPE_STATUS


INTERRUPTED_LINE = "interrupted"
# Whether the interrupt's one line was written already (a run's log captured descriptor 2 when Ctrl-C came).
_interrupt_reported = False


def report_interrupt(terminal_fd: int | None = None) -> None:
    """Writes the one line of a Ctrl-C, once: to `terminal_fd` (the terminal kept aside) or stderr."""
    global _interrupt_reported
    if _interrupt_reported:
        return
    _interrupt_reported = True
    if terminal_fd is None:
        print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
    else:
        os.write(terminal_fd, f"{INTERRUPTED_LINE}\n".encode())


# Where notices go while a run captures descriptor 2 (run_errors.RunLog): the terminal's stderr, kept aside.
_terminal_stderr: TextIO | None = None


def notice(line: str) -> None:
    """A progress line, notice or warning for the user: to stderr (stdout carries only results), at once."""
    stream = _terminal_stderr or sys.stderr
    try:
        print(line, file=stream, flush=True)
    except ValueError:  # The kept stream closed as the run ended (a progress thread's last line).
        print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def stderr_kept(terminal_fd: int) -> Iterator[None]:
    """While descriptor 2 is captured into a run's log, `notice` still writes to the terminal (`terminal_fd`).

    Only when sys.stderr is descriptor 2 itself: a caller that replaced sys.stderr (a test reading
    what the command says) keeps getting the notices there.
    """
    global _terminal_stderr
    try:
        real = sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError.
        real = False
    if not real:
        yield
        return
    stream = open(os.dup(terminal_fd), "w", encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace")
    previous, _terminal_stderr = _terminal_stderr, stream
    try:
        yield
    finally:
        _terminal_stderr = previous
        stream.close()
