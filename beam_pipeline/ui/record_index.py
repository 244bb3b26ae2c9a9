"""The UI's view of the run's image index (`common/image_index.py`): lookups, filters and counts in pyarrow.

The index is one Arrow table (read in a fraction of a second, or built once): the gallery's pages, its
filters and the counts are pyarrow.compute queries over its columns, and only the rows a page shows
become Python objects. A key is found by binary search in the keys sorted once at start-up (no dict
of a million strings). A request then reads one record (seek, one frame, its CRCs checked) instead of
scanning shards, and no path ever comes from a request: only the shard files the job's manifest
lists are opened.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.common import image_index
from beam_pipeline.common.records import read_records_at
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.layout import OutputLayout, shard_stem


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """One stored image: what the pages show, and where its record is."""

    key: str
    source: str
    split: str
    label: str
    shard: str  # the shard's stem, e.g. 'train-00003-of-00016'
    offset: int
    stored_bytes: int


def dictionary_column(table: pa.Table, name: str) -> pa.DictionaryArray:
    """A dictionary-encoded column as one array with one dictionary (the table's dictionaries unified)."""
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else pa.chunked_array(column.chunks).combine_chunks()


def equal_mask(column: pa.DictionaryArray, value: str) -> pa.BooleanArray:
    """Where a dictionary column holds `value`: its small dictionary searched, then its int32 indices compared."""
    found = pc.index(column.dictionary, value).as_py()  # -1 when absent: then no row matches.
    return pc.fill_null(pc.equal(column.indices, found), False)


class KeyLookup:
    """key -> row of an Arrow array of keys, by binary search over the keys sorted once (~0.3 s a million)."""

    def __init__(self, keys: pa.Array) -> None:
        self._order = pc.sort_indices(keys)
        self._sorted = keys.take(self._order)

    def find(self, key: str) -> int | None:
        """The row holding `key` (the first, in key order, when several do), or None."""
        low, high = 0, len(self._sorted)
        while low < high:  # ~20 steps at a million rows, each one Arrow scalar.
            middle = (low + high) // 2
            if self._sorted[middle].as_py() < key:
                low = middle + 1
            else:
                high = middle
        if low < len(self._sorted) and self._sorted[low].as_py() == key:
            return int(self._order[low].as_py())
        return None


class RecordIndex:
    """Every stored image of a job output (in shard and record order) and its failed rows, as Arrow tables."""

    def __init__(self, layout: OutputLayout, manifest: dict, cache_dir: str | None = None) -> None:
        self.layout = layout
        self.config = PreprocessConfig.from_dict(manifest["config"]["preprocess"])
        self._files = {shard_stem(shard["file"]): layout.path(shard["file"]) for shard in manifest["shards"]}
        index = image_index.open_index(layout, manifest, cache_dir)
        self.where = index.where
        table = index.table.unify_dictionaries().combine_chunks()
        stored = table.column("reason").null_count  # A stored row has no reason; the writer puts them first.
        self.images = table.slice(0, stored)
        self.failed = table.slice(stored)
        self.columns = {name: dictionary_column(self.images, name) for name in ("split", "label")}
        self.keys = self.images.column("key").combine_chunks()  # One array: what lookups and joins take.
        self._keys = KeyLookup(self.keys)

    def __len__(self) -> int:
        return self.images.num_rows

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.position(key) is not None

    def position(self, key: str) -> int | None:
        """The row of a stored key in `images` (gallery order), or None."""
        return self._keys.find(key)

    def get(self, key: str) -> Entry | None:
        """The entry of `key`, or None."""
        row = self.position(key)
        return None if row is None else self.entry(row)

    def entry(self, row: int) -> Entry:
        """The Entry of the stored image in row `row`."""
        return self.entries(pa.array([row], pa.int64()))[0]

    def entries(self, rows: pa.Array) -> list[Entry]:
        """The Entries of the stored images in `rows` (a page: a few dozen Python objects, not a million)."""
        picked = self.images.take(rows).select(["key", "source", "split", "label", "shard", "offset",
                                                "stored_bytes"]).to_pylist()
        return [Entry(**row) for row in picked]

    def record(self, key: str) -> bytes:
        """The serialized record of a stored key (KeyError when unknown), its CRCs checked."""
        entry = self.get(key)
        if entry is None:
            raise KeyError(key)
        with open(self._files[entry.shard], "rb") as f:
            f.seek(entry.offset)
            return next(read_records_at(f, verify=True, offset=entry.offset))[1]

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one index per process, alive as long as the app.
    def thumbnail(self, key: str, size: int = 128) -> bytes:
        """PNG bytes of a stored image, decoded through its storage codec, at most `size` px a side."""
        import numpy as np
        from PIL import Image

        record = self.record(key)
        side = self.config.image_size
        pixels = image_index.raw_pixels(record) if self.config.image_format == "raw" else None
        if pixels is not None and len(pixels) == side * side * 3:  # Raw storage: the pixels as they are.
            picture = Image.fromarray(np.frombuffer(pixels, np.uint8).reshape(side, side, 3))
        else:  # Encoded (or not what its manifest says): its codec decodes it, or says what is wrong.
            from tf_serving_input.codecs import parse_record

            image, _ = parse_record(record, self.config)
            picture = Image.fromarray(image.numpy())
        if max(picture.size) > size:
            picture = picture.resize((size, size), Image.Resampling.BILINEAR)
        out = io.BytesIO()
        picture.save(out, format="PNG")
        return out.getvalue()


def counts(column: pa.DictionaryArray) -> dict[str, int]:
    """{value: rows holding it} of a dictionary column, largest first (a value no row holds left out)."""
    if len(column) == 0:
        return {}
    tally = pc.value_counts(column.indices)
    names = column.dictionary.to_pylist()
    pairs = [(names[index], count) for index, count in
             zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist()) if index is not None]
    return dict(sorted(pairs, key=lambda pair: (-pair[1], pair[0])))


def rows_where(mask: Any) -> pa.Array:
    """The row numbers where a boolean mask is true, in order."""
    return pc.indices_nonzero(mask)
