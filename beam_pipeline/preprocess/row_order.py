"""Outcomes that arrive in any order, handed on in row order: `InRowOrder`.

A shard's URL rows complete in whatever order the network allows, but the shard
is written in row order, so its bytes are the same whichever fetch ended first.
Records that arrive before an earlier row is done wait here: in memory up to
`memory_bytes`, then in an anonymous temporary file (deleted when closed, even
on a kill), so a row that waits out its whole --url_timeout costs disk, not RAM.
"""

import os
import tempfile

from beam_pipeline.preprocess.row_preprocessor import Written

# Records held in memory while an earlier row is outstanding; beyond this they go to the spill file.
MEMORY_BYTES = 32 * 1024 * 1024


class _Spilled:
    """A Written record kept in the spill file: where it is, and its moments."""

    __slots__ = ("offset", "length", "moments")

    def __init__(self, offset, length, moments):
        self.offset, self.length, self.moments = offset, length, moments


class InRowOrder:
    """put(position, row, outcome) in any order; `ready()` yields (row, outcome) for positions 0, 1, 2, ..."""

    def __init__(self, memory_bytes=MEMORY_BYTES):
        self._memory_bytes = memory_bytes
        self._waiting = {}  # position -> (row, outcome or _Spilled)
        self._held = 0  # Record bytes in memory among the waiting.
        self._next = 0
        self._spill = None
        self.spilled = 0  # Records that went to the spill file (for tests and the status).

    def put(self, position, row, outcome):
        """Keeps a row's outcome until every earlier position has been handed on."""
        held = 0
        if isinstance(outcome, Written) and position != self._next:
            if self._held + len(outcome.record) > self._memory_bytes:
                outcome = self._write_spill(outcome)
            else:
                held = len(outcome.record)
        self._held += held
        self._waiting[position] = (row, outcome, held)

    def ready(self):
        """Yields (row, outcome) for the next positions in order, as far as they have arrived."""
        while self._next in self._waiting:
            row, outcome, held = self._waiting.pop(self._next)
            self._next += 1
            self._held -= held
            if isinstance(outcome, _Spilled):
                outcome = Written(os.pread(self._spill.fileno(), outcome.length, outcome.offset), outcome.moments)
            yield row, outcome

    @property
    def waiting(self):
        """How many outcomes wait for an earlier row."""
        return len(self._waiting)

    def close(self):
        """Drops the spill file."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _write_spill(self, written):
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="beam-image-pipeline-rows-")
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(written.record)
        self._spill.flush()
        self.spilled += 1
        return _Spilled(offset, len(written.record), written.moments)
