"""After the pipeline: manifest.json, errors.jsonl and the summary printed to the user."""

from __future__ import annotations

import collections
import datetime
import importlib.metadata
import json
import platform
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common import progress, terminal

if TYPE_CHECKING:
    from tf_serving_input.layout import RunFolder

# A shard's status file as a dict (shard_file.ShardFileWriter.publish), a manifest, an errors.jsonl entry.
Status = dict[str, Any]
# One line of a summary table: (name, value).
SummaryRow = tuple[str, Any]


class JobConfig(Protocol):
    """What a manifest records of a job's configuration (the preprocess job's frozen config)."""

    def to_dict(self) -> dict[str, Any]: ...

_PACKAGES = ("beam-image-pipeline", "apache-beam", "tensorflow", "tensorflow-transform", "tfx-bsl", "pyarrow")


def library_versions() -> dict[str, str | None]:
    """Versions of Python and of the libraries that shape the output."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def read_shard_statuses(layout: RunFolder, shard_names: Iterable[str]) -> list[Status]:
    """Loads the status file of every expected shard; raises RuntimeError naming missing ones."""
    from beam_pipeline.common.shard_file import read_status

    statuses: list[Status] = []
    missing: list[str] = []
    for name in shard_names:
        status = read_status(layout.status_file(name))
        if status is None:
            missing.append(name)
        else:
            statuses.append(status)
    if missing:
        raise RuntimeError(f"{len(missing)} shard(s) never completed (no status file, or one that fails its "
                           f"checksum): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return statuses


def shard_file_problems(layout: RunFolder, statuses: Iterable[Status]) -> list[str]:
    """The shard files that are missing or not of the size their status records, as 'file (why)'.

    One listing of the data folder, so it is cheap on object stores too; the checksums were
    computed while writing or verified while resuming, in this run.
    """
    sizes = {metadata.path: metadata.size_in_bytes
             for result in FileSystems.match([layout.shard_files_glob()]) for metadata in result.metadata_list}
    problems = []
    for status in sorted(statuses, key=lambda s: s["file"]):
        size = sizes.get(layout.path(status["file"]))
        if size is None:
            problems.append(f"{status['file']} (missing)")
        elif size != status["bytes"]:
            problems.append(f"{status['file']} ({size} bytes, its status says {status['bytes']})")
    return problems


def summarize_statuses(statuses: Sequence[Status]) -> tuple[dict[str, Any], list[Status]]:
    """(counts, failures sorted by line) from shard statuses: what every manifest reports of its shards."""
    failures = sorted((f for s in statuses for f in s["failed"]), key=lambda f: (f.get("line", 0), f["key"]))
    per_split: collections.defaultdict[str, dict[str, int]] = collections.defaultdict(
        lambda: {"rows": 0, "written": 0, "failed": 0, "shards": 0})
    for status in statuses:
        counts = per_split[status["split"]]
        counts["rows"] += status["rows"]
        counts["written"] += status["records"]
        counts["failed"] += len(status["failed"])
        counts["shards"] += 1
    fetched = [s["fetch"] for s in statuses if "fetch" in s]
    return {
        "rows": sum(s["rows"] for s in statuses),
        "written": sum(s["records"] for s in statuses),
        "failed": len(failures),
        "splits": dict(sorted(per_split.items())),
        "failed_by_reason": dict(collections.Counter(f["reason"] for f in failures).most_common()),
        # URL rows (a run of files has no such key): how many, and the bytes fetched.
        **({"fetch": {"urls": sum(f["urls"] for f in fetched), "bytes": sum(f["bytes"] for f in fetched)}}
           if fetched else {}),
        "shards": [{"file": s["file"], "split": s["split"], "records": s["records"],
                    "bytes": s["bytes"], "sha256": s["sha256"],
                    # A shard kept from a run of an earlier version has no framing digest: read by its SHA-256.
                    **({"framing_sha256": s["framing_sha256"]} if "framing_sha256" in s else {})}
                   for s in sorted(statuses, key=lambda s: s["file"])],
    }, failures


def build_manifest(job: JobConfig, statuses: Sequence[Status], statistics: tuple[list[float], list[float], list[str]],
                   wall_seconds: float, runner: str | None,
                   label_cells: dict[str, int] | None = None) -> tuple[dict[str, Any], list[Status]]:
    """The manifest dict (see README "Output contract"); errors sorted by CSV line.

    `label_cells`: how many label cells the CSV's read changed (`stripped` of surrounding whitespace,
    `blank`: whitespace only, read as unlabeled), recorded so the summary can say so.
    """
    summary, failures = summarize_statuses(statuses)
    mean, std, vocabulary = statistics
    return {
        **summary,
        **({"label_cells": dict(label_cells)} if label_cells is not None else {}),
        "statistics": {"split": "train", "pixel_mean": mean, "pixel_std": std,
                       "label_vocabulary": vocabulary},
        "config": job.to_dict(),
        "runner": runner,
        "wall_seconds": round(wall_seconds, 3),
        "images_per_second": round(summary["written"] / wall_seconds, 2) if wall_seconds > 0 else None,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": library_versions(),
    }, failures


def write_outputs(layout: RunFolder, manifest: dict[str, Any], failures: Iterable[Status]) -> None:
    """Writes errors.jsonl, then manifest.json (last, so its presence means the run finished)."""
    write_jsonl(layout.errors_file, failures)
    write_manifest(layout, manifest)


def write_jsonl(path: str, records: Iterable[Status]) -> None:
    """Writes one JSON object per line (UTF-8, unescaped text)."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for record in records:
            f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))


def write_text(path: str, text: str) -> None:
    """Writes a UTF-8 text file (features.json) on any Beam filesystem."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(text.encode("utf-8"))


def write_manifest(layout: RunFolder, manifest: dict[str, Any]) -> None:
    """Writes manifest.json."""
    with FileSystems.create(layout.manifest_file, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(json.dumps(manifest, ensure_ascii=False, indent=2).encode("utf-8"))


def _summary(rows: Iterable[SummaryRow]) -> str:
    """The end-of-run summary table: a header, then one aligned `name value` line per row."""
    return "\n".join(["", "Summary", "-------"] + [f"  {name:<22} {value}" for name, value in rows])


def _counts(manifest: dict[str, Any], done: str) -> list[SummaryRow]:
    """The rows/done/failed lines, with failures by reason."""
    rows: list[SummaryRow] = [("rows", manifest["rows"]), (done, manifest[done]), ("failed", manifest["failed"])]
    rows += [(f"  {reason}", count) for reason, count in manifest["failed_by_reason"].items()]
    if "fetch" in manifest:  # URL rows: how many, and what this run requested and fetched (a resume, fewer).
        fetch = manifest["fetch"]
        requested = fetch.get("requested", fetch["urls"])
        asked = "" if requested == fetch["urls"] else f", {requested} requested in this run"
        rows.append(("URL rows", f"{fetch['urls']}{asked}, {fetch['bytes'] / 2**20:.1f} MiB fetched"))
    cells = manifest.get("label_cells", {})  # What the CSV's read changed, so that nothing changes silently.
    if cells.get("stripped"):
        rows.append(("labels stripped", f"{cells['stripped']} had surrounding spaces, stripped"))
    if cells.get("blank"):
        rows.append(("labels blank", f"{cells['blank']} held only spaces: unlabeled"))
    return rows


def _ending(manifest: dict[str, Any], layout: RunFolder) -> list[SummaryRow]:
    """The time, output and (when rows failed) errors lines."""
    rows: list[SummaryRow] = [("time", f"{progress.format_duration(manifest['wall_seconds'])} "
                     f"({manifest['images_per_second']} images/s)"),
            ("output", terminal.shown(layout.root, terminal.PATH_WIDTH))]
    errors = [("errors", terminal.shown(layout.errors_file, terminal.PATH_WIDTH))] if manifest["failed"] else []
    return rows + errors


def format_summary(manifest: dict[str, Any], layout: RunFolder, extra: Sequence[SummaryRow] = ()) -> str:
    """The human summary table printed at the end of a run (stored text escaped and cut: `terminal.shown`);
    `extra` rows (a job's own: each step's time) come before the time and output lines."""
    stats = manifest["statistics"]
    vocabulary = stats["label_vocabulary"]
    return _summary(
        _counts(manifest, "written")
        + [(f"split {terminal.shown(split, 16)}",
            f"{counts['written']} written, {counts['failed']} failed, {counts['shards']} shards")
           for split, counts in manifest["splits"].items()]
        + [("pixel mean (RGB)", ", ".join(f"{v:.2f}" for v in stats["pixel_mean"])),
           ("pixel std (RGB)", ", ".join(f"{v:.2f}" for v in stats["pixel_std"])),
           ("labels", f"{len(vocabulary)}: {terminal.shown_list(vocabulary[:10])}"
                      f"{' ...' if len(vocabulary) > 10 else ''}")]
        + list(extra)
        + _ending(manifest, layout))


def format_prediction_summary(manifest: dict[str, Any], layout: RunFolder) -> str:
    """The human summary printed at the end of a predict run."""
    model = manifest["model"]
    return _summary(
        _counts(manifest, "predicted")
        + [("model", f"{terminal.shown(model['model_dir'], terminal.PATH_WIDTH)} ({model['signature']})"),
           ("embedding", f"{model['embedding_size']} x {model['embedding_dtype']}, unit length")]
        + _ending(manifest, layout))
