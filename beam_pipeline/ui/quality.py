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

import collections
import dataclasses
import json
import os
from typing import Any

from beam_pipeline.common.quality_outputs import FLAG_NUMBERS
from tf_serving_input.layout import QualityLayout

GROUPS_FILE = QualityLayout.DUPLICATE_GROUPS_FILE
FLAGS_FILE = QualityLayout.IMAGE_FLAGS_FILE
SUMMARY_FILE = QualityLayout.SUMMARY_FILE
GROUP_COLUMNS = ["group", "key", "source", "split", "label", "match", "distance"]
FLAG_COLUMNS = ["key", "source", "split", "label", "flags", *FLAG_NUMBERS]


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """One group of duplicate images."""

    group: int
    members: list[dict[str, Any]]

    @property
    def splits(self) -> list[str]:
        """The splits its images are in."""
        return sorted({member["split"] for member in self.members})

    @property
    def labels(self) -> list[str]:
        """The labels its images carry."""
        return sorted({member["label"] for member in self.members})

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
    """A quality folder: duplicate groups (by key too), leaks, label conflicts, flagged images, the summary."""

    def __init__(self, quality_dir: str) -> None:
        import pyarrow.parquet as pq

        self.quality_dir = quality_dir
        _check_outputs(quality_dir)
        self.summary = _read_json(os.path.join(quality_dir, SUMMARY_FILE))
        rows = pq.read_table(os.path.join(quality_dir, GROUPS_FILE), columns=GROUP_COLUMNS).to_pylist()
        by_group: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        for row in rows:
            by_group[int(row["group"])].append(row)
        self.groups = [Group(group, members) for group, members in sorted(by_group.items())]
        self.group_of = {member["key"]: group for group in self.groups for member in group.members}
        self.flagged = pq.read_table(os.path.join(quality_dir, FLAGS_FILE), columns=FLAG_COLUMNS).to_pylist()
        for row in self.flagged:  # What the image page shows beside the flags.
            row["numbers"] = ", ".join(f"{name} {row[name]:.1f}" for name in FLAG_NUMBERS if row[name] is not None)
        self.flags_of = {row["key"]: row for row in self.flagged}

    @property
    def leaks(self) -> list[Group]:
        """The groups spanning more than one split."""
        return [group for group in self.groups if group.is_leak]

    @property
    def label_conflicts(self) -> list[Group]:
        """The groups whose images carry more than one label."""
        return [group for group in self.groups if group.is_label_conflict]
