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
import json
from typing import Any

from beam_pipeline.inputs import rows as csv_rows
from beam_pipeline.inputs.cells import quoted
from beam_pipeline.quality.groups import Group, Images
from tf_serving_input.columns import FeatureSpec


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


class Unwritable(ValueError):
    """A cell of the list that no CSV cell can hold so that the job reads it back the same (a list item holding
    the list separator); the message names the file, the row, the column and the item, in one line."""


def clean_split_csv(csv_path: str, columns: csv_rows.CsvColumns, moves: dict[str, str],
                    reading: csv_rows.ColumnReading = csv_rows.ColumnReading()) -> tuple[str, int]:
    """(the CSV text with moved rows' split cells changed and relative paths resolved, rows written).

    The header and its column order are kept. `reading`: the job's list format and `--list_separator`. A
    JSON Lines or Parquet list's cells are written in the form the job reads from a CSV (`cell_text`): a
    list's items joined by the separator, a box's four numbers by spaces, so that the clean split fed back as
    `--input` with the same `--column` flags gives the same values; Unwritable when one cannot be.
    """
    header = csv_rows.read_header(csv_path, reading.input_format)
    split_at = header.index(columns.split) if columns.split in header else None
    path_at = [cell.strip() for cell in header].index(columns.path)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    written = 0
    untyped = dataclasses.replace(reading, features=FeatureSpec())  # The cells as they are: none typed.
    for row, cells in csv_rows.iter_rows_with_cells(csv_path, columns, untyped):
        try:
            cells = [cell_text(cell, reading.separator) for cell in cells]
        except Unwritable as error:
            at = next(i for i, cell in enumerate(cells) if _holds(cell, str(error.args[1])))
            raise Unwritable(f"{csv_path}: row {row.line}: column {header[at]!r}: {error.args[0]}") from None
        cells[path_at] = row.path
        if split_at is not None and row.key in moves:
            cells += [""] * (split_at + 1 - len(cells))
            cells[split_at] = moves[row.key]
        writer.writerow(cells)
        written += 1
    return out.getvalue(), written


def cell_text(value: Any, separator: str) -> str:
    """A list's cell as a CSV cell the job reads back the same (`beam_pipeline/inputs/cells.py`): text as it is,
    a number's shortest digits, a null blank, a list's items joined by `separator` (a box, a list of numbers,
    as its numbers joined by spaces), anything else as JSON. Unwritable(why, item) for an item holding the
    separator."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, (list, tuple)) for item in value) and value:
            parts = [" ".join(_scalar(number, separator, " ") for number in item) for item in value]
        elif not any(isinstance(item, (list, tuple, dict)) for item in value):
            parts = [_scalar(item, separator) for item in value]
        else:
            return json.dumps(value, ensure_ascii=False)
        return separator.join(parts)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _scalar(item: Any, separator: str, joiner: str = "") -> str:
    text = "" if item is None else str(item)
    for mark in (separator, joiner):
        if mark and mark in text:
            raise Unwritable(f"{quoted(text)} holds the list separator {mark!r}: no CSV cell can hold it as one "
                             "item (give the job another --list_separator)", text)
    return text


def _holds(cell: Any, item: str) -> bool:
    """Whether a cell is the list that holds `item` (to name its column)."""
    if isinstance(cell, (list, tuple)):
        return any(_holds(part, item) for part in cell)
    return cell is not None and not isinstance(cell, str) and str(cell) == item or cell == item
