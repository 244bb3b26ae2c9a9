"""clean_split.csv: the job's input CSV again, every row once, with splits moved so no group spans two.

How a group's split is chosen: the split most of its members are in (fewest rows move); a tie goes to the
split of the group's first member in CSV order. Rows in no group, and rows the job failed to read (no
signals, so in no group), keep their split. A relative path is written resolved (against the job's CSV's
folder, as the job read it): the file sits in another folder, and the job must find the same images from it.

A clean split that would empty a split, or move more than `--max_split_moved` of a split's images out of it,
is not written (`check_moves` says why) unless `--force_clean_split`: duplicates that chain through a dataset
(single linkage) once moved a whole validation split into train.
"""

from __future__ import annotations

import csv
import dataclasses
import io

from beam_pipeline.inputs import rows as csv_rows
from beam_pipeline.quality.groups import Group, Images


def chosen_splits(images: Images, groups: list[Group]) -> dict[str, str]:
    """key -> the split it moves to, for every member of a group that spans splits and is not in it already."""
    moves = {}
    for group in groups:
        if not group.leak:
            continue
        counts: dict[str, int] = {}
        for member in group.members:
            counts[images.splits[member]] = counts.get(images.splits[member], 0) + 1
        first_split = images.splits[group.members[0]]
        best = max(counts.items(), key=lambda item: (item[1], item[0] == first_split))[0]
        for member in group.members:
            if images.splits[member] != best:
                moves[images.keys[member]] = best
    return moves


@dataclasses.dataclass(frozen=True)
class SplitCheck:
    """The measured images per split before and after the moves, and why the clean split is refused (if it is)."""

    before: dict[str, int]
    after: dict[str, int]
    moved_out: dict[str, int]
    problems: list[str]  # One line each; empty: the clean split may be written.


def check_moves(images: Images, moves: dict[str, str], max_moved: float) -> SplitCheck:
    """Per-split counts before and after `moves`; a problem for each split emptied or losing over `max_moved`."""
    before: dict[str, int] = {}
    for split in images.splits:
        before[split] = before.get(split, 0) + 1
    after, moved_out = dict(before), dict.fromkeys(before, 0)
    split_of = dict(zip(images.keys, images.splits, strict=True))
    for key, split in moves.items():  # Only measured images move (chosen_splits), each out of its own split.
        old = split_of[key]
        after[old] -= 1
        after[split] = after.get(split, 0) + 1
        moved_out[old] += 1
    problems = []
    for split in sorted(before):
        out, total = moved_out[split], before[split]
        if out and out == total:
            problems.append(f"it would empty split {split!r} (all {total} of its images moved out)")
        elif out > max_moved * total:
            problems.append(f"it would move {out} of the {total} images of split {split!r} out ({out / total:.0%}), "
                            f"more than --max_split_moved {max_moved:g}")
    return SplitCheck(before, after, moved_out, problems)


def clean_split_csv(csv_path: str, columns: csv_rows.CsvColumns, moves: dict[str, str]) -> tuple[str, int]:
    """(the CSV text with moved rows' split cells changed and relative paths resolved, rows written).

    The header and its column order are kept.
    """
    header = csv_rows.read_header(csv_path)
    split_at = header.index(columns.split) if columns.split in header else None
    path_at = [cell.strip() for cell in header].index(columns.path)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    written = 0
    for row, cells in csv_rows.iter_rows_with_cells(csv_path, columns):
        cells = list(cells)
        cells[path_at] = row.path
        if split_at is not None and row.key in moves:
            cells += [""] * (split_at + 1 - len(cells))
            cells[split_at] = moves[row.key]
        writer.writerow(cells)
        written += 1
    return out.getvalue(), written
