"""The quality job's folder (README "Quality"), read by the columns `common/quality_outputs.py` owns.

    QUALITY_OUT/duplicate_groups.parquet  one row per image in a group: group, key, source, split, label,
                                          match ('exact' | 'near'), distance (hash bits to the first member)
    QUALITY_OUT/image_flags.parquet       one row per flagged image: key, source, split, label, flags and the
                                          numbers they were judged by (brightness, contrast, blur)
    QUALITY_OUT/summary.json              counts and thresholds

A leak is a group whose images are in more than one split; a label conflict one whose images carry more
than one label.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from beam_pipeline.common.quality_outputs import FLAG_NUMBERS
from tf_serving_input.layout import QualityLayout

GROUPS_FILE = QualityLayout.DUPLICATE_GROUPS_FILE
FLAGS_FILE = QualityLayout.IMAGE_FLAGS_FILE
SUMMARY_FILE = QualityLayout.SUMMARY_FILE
GROUP_COLUMNS = ["group", "key", "source", "split", "label", "match", "distance"]
FLAG_COLUMNS = ["key", "source", "split", "label", "flags", *FLAG_NUMBERS]


MEMBERS_SHOWN = 24  # A group's members a page draws; the gallery's group filter pages through all of them.


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """One group of duplicate images: its first members (up to MEMBERS_SHOWN), its size, splits and labels."""

    group: int
    members: list[dict[str, Any]]
    size: int
    splits: list[str]
    labels: list[str]

    @property
    def is_leak(self) -> bool:
        """Whether the same image is in two splits (e.g. train and validation)."""
        return len(self.splits) > 1

    @property
    def is_label_conflict(self) -> bool:
        """Whether the same image carries two labels."""
        return len(self.labels) > 1


def _read_json(path: str) -> Any:
    """A JSON file's content; ValueError naming the file when it does not parse."""
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except ValueError as error:
            raise ValueError(f"{path} is damaged ({error}): rerun the quality command to rewrite it") from None


def _check_outputs(quality_dir: str) -> None:
    """ValueError naming the first file the UI reads whose SHA-256 differs from what the quality manifest recorded."""
    import hashlib

    recorded = _read_json(os.path.join(quality_dir, QualityLayout.MANIFEST_FILE)).get("outputs") or {}
    for name in (GROUPS_FILE, FLAGS_FILE, SUMMARY_FILE):
        path = os.path.join(quality_dir, name)
        if name in recorded:
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != recorded[name]:
                    raise ValueError(f"{path} does not match the SHA-256 the quality manifest recorded (damaged "
                                     "or changed): rerun the quality command to rewrite it")


class QualityRun:
    """A quality folder as Arrow tables: duplicate groups, leaks, label conflicts, flagged images, the summary.

    The members are sorted by group once (each group a slice: its start and size), the groups' split
    and label counts come from one `group_by`, and `attach` maps members and flagged images to the
    image index's rows, so the gallery's group and flag filters are array slices, not Python objects.
    """

    def __init__(self, quality_dir: str) -> None:
        import numpy as np
        import pyarrow.parquet as pq

        self.quality_dir = quality_dir
        _check_outputs(quality_dir)
        self.summary = _read_json(os.path.join(quality_dir, SUMMARY_FILE))
        members = pq.read_table(os.path.join(quality_dir, GROUPS_FILE), columns=GROUP_COLUMNS).combine_chunks()
        order = np.argsort(members.column("group").to_numpy(), kind="stable")  # Within a group: file order.
        self.members = members.take(order)
        ids = self.members.column("group").to_numpy()
        self.group_ids, self._starts, self._sizes = np.unique(ids, return_index=True, return_counts=True)
        stats = self.members.group_by("group").aggregate([("split", "count_distinct"), ("label", "count_distinct")])
        stats = stats.sort_by("group")
        self._leak = stats.column("split_count_distinct").to_numpy() > 1
        self._conflict = stats.column("label_count_distinct").to_numpy() > 1
        self.flagged = pq.read_table(os.path.join(quality_dir, FLAGS_FILE), columns=FLAG_COLUMNS).combine_chunks()
        flags = self.flagged.column("flags").combine_chunks()  # Arrays, not chunked: rows are taken by them.
        self.flag_names = sorted(str(name) for name in pc.unique(pc.list_flatten(flags)).to_pylist())
        self._flag_rows = {name: pc.list_parent_indices(flags).filter(pc.equal(pc.list_flatten(flags), name))
                           for name in self.flag_names}
        self._member_rows: Any = None
        self._flagged_rows: Any = None

    def attach(self, images_keys: pa.Array) -> None:
        """Maps the members and flagged images to rows of the image index (its `images` keys): once, at start."""
        # -1: a member the index does not hold (a quality folder is checked to be of this run, so none).
        self._member_rows = pc.fill_null(pc.index_in(self.members.column("key"), value_set=images_keys),
                                         -1).to_numpy()
        # One array (not a table's chunked column): the gallery takes rows of it with `array_take`.
        self._flagged_rows = pc.index_in(self.flagged.column("key").combine_chunks(), value_set=images_keys)
        pa.default_memory_pool().release_unused()  # The hash tables of the index's keys, freed.

    @property
    def group_count(self) -> int:
        """How many duplicate groups."""
        return len(self.group_ids)

    @property
    def leak_count(self) -> int:
        """How many groups span more than one split."""
        return int(self._leak.sum())

    @property
    def conflict_count(self) -> int:
        """How many groups carry more than one label."""
        return int(self._conflict.sum())

    def groups(self, kind: str = "all", top: int = 200) -> list[Group]:
        """The first `top` groups (by group number) of a kind: 'all', 'leaks' or 'conflicts'."""
        import numpy as np

        chosen = {"all": np.arange(len(self.group_ids)), "leaks": np.flatnonzero(self._leak),
                  "conflicts": np.flatnonzero(self._conflict)}[kind][:top]
        return [self._group(int(at)) for at in chosen]

    def _group(self, at: int) -> Group:
        start, size = int(self._starts[at]), int(self._sizes[at])
        members = self.members.slice(start, size)
        shown = members.slice(0, MEMBERS_SHOWN).to_pylist()
        return Group(int(self.group_ids[at]), shown, size,
                     sorted(pc.unique(members.column("split")).to_pylist()),
                     sorted(pc.unique(members.column("label")).to_pylist()))

    def _at(self, group: int) -> int | None:
        import numpy as np

        at = int(np.searchsorted(self.group_ids, group))
        return at if at < len(self.group_ids) and self.group_ids[at] == group else None

    def group_of(self, key: str) -> Group | None:
        """The group holding `key`, or None."""
        import numpy as np

        found = pc.index(self.members.column("key"), key).as_py()
        if found < 0:
            return None
        return self._group(int(np.searchsorted(self._starts, found, side="right")) - 1)

    def flags_of(self, key: str) -> dict[str, Any] | None:
        """The flagged row of `key` (its flags and the numbers they were judged by), or None."""
        found = pc.index(self.flagged.column("key"), key).as_py()
        if found < 0:
            return None
        row = self.flagged.slice(found, 1).to_pylist()[0]
        row["numbers"] = ", ".join(f"{name} {row[name]:.1f}" for name in FLAG_NUMBERS if row[name] is not None)
        return row

    def flagged_first(self, top: int) -> list[dict[str, Any]]:
        """The first `top` flagged images' rows."""
        return self.flagged.slice(0, top).to_pylist()

    def has_group(self, group: int) -> bool:
        """Whether `group` is a group number of this folder."""
        return self._at(group) is not None

    def rows_in_group(self, group: int) -> pa.Array:
        """The image index's rows of a group's members, in gallery order (attach first)."""
        import numpy as np

        at = self._at(group)
        if at is None or self._member_rows is None:
            return pa.array([], pa.int64())
        rows = self._member_rows[self._starts[at]: self._starts[at] + self._sizes[at]]
        return pa.array(np.sort(rows[rows >= 0]).astype(np.int64))

    def rows_with_flag(self, flag: str) -> pa.Array:
        """The image index's rows of the images flagged `flag`, in gallery order (attach first)."""
        if self._flagged_rows is None or flag not in self._flag_rows:
            return pa.array([], pa.int64())
        rows = self._flagged_rows.take(self._flag_rows[flag]).drop_null()
        return pc.cast(rows.take(pc.sort_indices(rows)), pa.int64())
