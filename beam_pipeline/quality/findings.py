"""After the pipeline: the signals and pairs turned into groups, flags, the clean split, the report, the summary.

Runs in the launching process on small columns only (keys, hashes, digests, numbers: ~60 bytes an image,
~60 MB at a million); pixels are read again only for the report's thumbnails (top N per section).
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.quality_outputs import FLAG_SCHEMA, GROUP_SCHEMA, LABEL_ERROR_SCHEMA
from beam_pipeline.inputs import rows as csv_rows
from beam_pipeline.inputs.cells import DEFAULT_LIST_SEPARATOR
from beam_pipeline.quality import clean_split, groups, health, report_html
from beam_pipeline.quality.pairs import as_unsigned
from beam_pipeline.quality.signal_shards import read_table
from tf_serving_input import features
from tf_serving_input.layout import OutputLayout, QualityLayout, temp_path


def write_file(path: str, data: bytes) -> None:
    """Writes `data` under a temporary name, then renames it: a report file exists only complete."""
    from beam_pipeline.common.files import new_attempt_id

    temp = temp_path(path, new_attempt_id())
    with FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    FileSystems.rename([temp], [path])


def _parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue()


def read_signals(layout: QualityLayout, names: list[str], csv_order: dict[str, int]) -> pa.Table:
    """Every image's signals, sorted in the job's CSV order."""
    tables = [read_table(layout.shard_file(name)) for name in names]
    table = pa.concat_tables(tables) if tables else None
    positions = np.array([csv_order.get(key, len(csv_order)) for key in table.column("key").to_pylist()])
    return table.take(pa.array(np.argsort(positions, kind="stable")))


def read_pairs(layout: QualityLayout, glob: str | None = None) -> list[tuple[str, str, int]]:
    """The pairs the pipeline's pair steps wrote (by hash, or those under `glob`): (key_a, key_b, distance)."""
    pairs = []
    for match in FileSystems.match([glob or layout.pairs_glob])[0].metadata_list:
        with FileSystems.open(match.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for line in f.read().decode("ascii").splitlines():
                a, b, distance = line.split()
                pairs.append((a, b, int(distance)))
    return sorted(pairs)


def read_oversized(layout: QualityLayout) -> int:
    """How many band buckets were over --max_bucket."""
    count = 0
    for match in FileSystems.match([layout.path(layout.PAIRS_DIR, "oversized*")])[0].metadata_list:
        with FileSystems.open(match.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            count += len(f.read().splitlines())
    return count


@dataclasses.dataclass
class Findings:
    """What the run found, ready to write."""

    summary: dict[str, Any]
    groups_table: pa.Table
    flags_table: pa.Table
    label_errors_table: pa.Table
    clean_csv: str | None  # None: refused (summary["clean_split"]["problems"] says why); no clean_split.csv.
    report: str


def analyze(config: Any, layout: QualityLayout, job_manifest: dict[str, Any], names: list[str],
            failed_rows: int, csv_keys: list[str], prediction_files: list[str] = ()) -> Findings:
    """Groups, flags, clean split, report and summary from the signals and pairs on disk.

    `csv_keys`: the job's CSV rows' keys in file order (`rows.row_keys`, read by the launcher's check).
    """
    job_config = job_manifest["config"]
    columns = csv_rows.CsvColumns(**job_config["columns"])
    csv_path = job_config["input_csv"]
    table = read_signals(layout, names, {key: index for index, key in enumerate(csv_keys)})
    col = {name: table.column(name).to_pylist()
           for name in ("key", "source", "split", "label", "shard", "index", "offset")}
    numbers = {name: table.column(name).to_numpy() for name in ("brightness", "contrast", "blur")}
    images = groups.Images(keys=col["key"], splits=col["split"], labels=col["label"],
                           hashes=as_unsigned(table.column("phash").to_numpy()),
                           digests=list(zip(table.column("digest_hi").to_pylist(),
                                            table.column("digest_lo").to_pylist(), strict=True)))
    position = {key: i for i, key in enumerate(images.keys)}
    pairs = read_pairs(layout)
    edges = [(position[a], position[b]) for a, b, _ in pairs if a in position and b in position]
    neighbours = _embedding_neighbours(config, layout, list(prediction_files)) if prediction_files else None
    planned = plan(config, images, edges, neighbours)
    found, moves, suspects, embedding = planned.found, planned.moves, planned.suspects, planned.embedding
    clean_csv: str | None = None
    clean_rows = len(csv_keys)
    written, problems = planned.written, list(planned.check.problems)
    if written:
        reading = csv_rows.ColumnReading(separator=job_config.get("list_separator", DEFAULT_LIST_SEPARATOR),
                                         input_format=job_config.get("input_format", ""))
        try:
            clean_csv, clean_rows = clean_split.clean_split_csv(csv_path, columns, moves, reading)
        except clean_split.Unwritable as error:  # Not written, and said why: the other findings stand.
            written, problems, moves = False, [*problems, str(error)], {}
            planned.warnings.append(f"clean_split.csv not written: {error}")

    group_rows: dict[str, list[Any]] = {name: [] for name in GROUP_SCHEMA.names}
    for group in found:
        distances = groups.distances_to_first(images, group)
        first_digest = images.digests[group.members[0]]
        for member, distance in zip(group.members, distances, strict=True):
            values = {"group": group.group, "key": images.keys[member], "source": col["source"][member],
                      "split": images.splits[member], "label": images.labels[member],
                      "match": "exact" if images.digests[member] == first_digest else "near",
                      "distance": distance, "group_size": len(group.members),
                      "group_match": "exact" if group.exact else "near", "leak": group.leak,
                      "label_conflict": group.conflict,
                      "clean_split": moves.get(images.keys[member], images.splits[member])}
            for name, value in values.items():
                group_rows[name].append(value)
    groups_table = pa.table(group_rows, schema=GROUP_SCHEMA)

    thresholds = health.HealthThresholds(config.near_constant_contrast, config.dark_brightness,
                                         config.bright_brightness, config.blur_variance)
    per_image = health.image_flags(numbers["brightness"], numbers["contrast"], numbers["blur"], thresholds)
    flagged = [i for i, image_flags in enumerate(per_image) if image_flags]
    flags_table = pa.table({
        "key": [images.keys[i] for i in flagged], "source": [col["source"][i] for i in flagged],
        "split": [images.splits[i] for i in flagged], "label": [images.labels[i] for i in flagged],
        "flags": [per_image[i] for i in flagged],
        **{name: numbers[name][flagged].astype(np.float32) for name in numbers}}, schema=FLAG_SCHEMA)
    by_flag = {name: sum(name in per_image[i] for i in flagged) for name in health.FLAGS}
    suspect_rows = [dict(s, source=col["source"][position[s["key"]]], split=images.splits[position[s["key"]]])
                    for s in suspects if s["key"] in position]
    label_errors_table = pa.Table.from_pylist(suspect_rows, schema=LABEL_ERROR_SCHEMA)

    summary = {
        "images": len(images.keys), "rows_failed": failed_rows + job_manifest.get("failed", 0),
        "exact_groups": sum(g.exact for g in found), "near_groups": sum(not g.exact for g in found),
        "images_in_groups": sum(len(g.members) for g in found),
        "duplicate_images": sum(len(g.members) - 1 for g in found),
        "leaking_groups": sum(g.leak for g in found), "label_conflict_groups": sum(g.conflict for g in found),
        "suspected_label_errors": len(suspect_rows) if prediction_files else None,  # None: no embeddings.
        "embedding_pairs": len(planned.embedding_pairs) if prediction_files else None,
        "embedding": embedding,  # None without --predictions_dir.
        "largest_group": planned.largest,
        "flagged_images": len(flagged), "flagged_by_flag": by_flag,
        "near_pairs": len(pairs), "oversized_buckets": read_oversized(layout),
        "clean_split": {"rows": clean_rows, "rows_moved": len(moves), "written": written,
                        "rows_proposed": len(planned.proposed), "problems": problems,
                        "images_before": planned.check.before,
                        "images_after": planned.check.after if written else planned.check.before},
        "warnings": planned.warnings,
        "thresholds": config.thresholds(),
        "input_dir": config.input_dir, "input_csv": csv_path,
    }
    report = _report(config, job_manifest, images, col, found, per_image, flagged, summary, moves,
                     [position[s["key"]] for s in suspect_rows], suspect_rows)
    return Findings(summary, groups_table, flags_table, label_errors_table, clean_csv, report)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The groups and the clean split decided from the pairs, with what was left out and why."""

    found: list[groups.Group]
    largest: int  # Images in the largest group.
    embedding: dict[str, Any] | None  # summary.json's "embedding"; None without embeddings.
    embedding_pairs: list[tuple[str, str, float]]  # Within the distance used (whether used or not).
    suspects: list[dict[str, Any]]
    proposed: dict[str, str]  # key -> split: the moves the groups call for.
    check: clean_split.SplitCheck
    written: bool  # Whether clean_split.csv is written (no problem, or --force_clean_split).
    moves: dict[str, str]  # The moves written: `proposed`, or none when refused.
    warnings: list[str]


def plan(config: Any, images: groups.Images, hash_edges: list[tuple[int, int]],
         neighbours: list[tuple[str, str, float]] | None) -> Plan:
    """Groups from the hash edges (positions) and, unless they chain or mix labels, the embedding pairs; then the
    clean split, refused when it empties a split or moves over --max_split_moved of one (README "Quality").

    `neighbours`: the verified embedding candidates (key_a, key_b, cosine distance), None without embeddings.
    """
    position = {key: i for i, key in enumerate(images.keys)}
    n = len(images.keys)
    edges = list(hash_edges)
    embedding, pairs, suspects, warnings = None, [], [], []
    if neighbours is not None:
        embedding, pairs, suspects = _judge_embeddings(config, images, position, neighbours)
        if embedding["used"]:
            edges += [(position[a], position[b]) for a, b, _ in pairs if a in position and b in position]
        warnings += [f"embedding pairs not used for the groups or the clean split: {problem}"
                     for problem in embedding["problems"]]
    found = groups.find_groups(images, edges)
    largest = len(found[0].members) if found else 0
    if groups.is_chain(largest, n, config.max_group_share):
        warnings.append(f"group 0 holds {largest} of the {n} images ({largest / n:.0%}, over --max_group_share "
                        f"{config.max_group_share:g}): likely a chain of near pairs (A near B near C), not copies "
                        "of one picture; review it in report.html")
    proposed = clean_split.chosen_splits(images, found)
    check = clean_split.check_moves(images, proposed, config.max_split_moved)
    written = not check.problems or config.force_clean_split
    if not written:
        warnings.append(f"clean_split.csv not written: {'; '.join(check.problems)}. Review the groups in "
                        "report.html; --force_clean_split writes it anyway")
    elif check.problems:
        warnings.append(f"clean_split.csv written although {'; '.join(check.problems)} (--force_clean_split)")
    return Plan(found, largest, embedding, pairs, suspects, proposed, check, written, proposed if written else {},
                warnings)


def _embedding_neighbours(config: Any, layout: QualityLayout, prediction_files: list[str]) -> list[
        tuple[str, str, float]]:
    """The embedding candidates the pipeline proposed, verified by their real cosine distance."""
    from beam_pipeline.quality import embedding_pairs as by_embedding

    candidates = read_pairs(layout, layout.embedding_pairs_prefix + "*")
    verified_to = by_embedding.verify_distance(config.embedding_distance, config.label_error_distance)
    return by_embedding.verified_neighbours([(a, b) for a, b, _ in candidates], prediction_files, verified_to)


def _judge_embeddings(config: Any, images: groups.Images, position: dict[str, int],
                      neighbours: list[tuple[str, str, float]]) -> tuple[dict[str, Any], list[tuple[str, str, float]],
                                                                         list[dict[str, Any]]]:
    """(summary.json's "embedding", the embedding pairs within the distance used, suspected label errors).

    The pairs are "used" for the groups unless they chain into one large group (--max_group_share) or mostly
    join different labels (MAX_CROSS_LABEL_SHARE); the hash pairs count either way.
    """
    from beam_pipeline.quality import embedding_pairs as by_embedding

    labels = dict(zip(images.keys, images.labels, strict=True))
    hashes = images.hashes.tolist()  # Python ints: one XOR a pair, no NumPy call per pair.

    def same_picture(a: str, b: str) -> bool:
        """The digest or the perceptual hash calls a and b one picture."""
        i, j = position.get(a), position.get(b)
        if i is None or j is None:
            return False
        close = (hashes[i] ^ hashes[j]).bit_count() <= config.hash_distance
        return images.digests[i] == images.digests[j] or close

    verified_to = by_embedding.verify_distance(config.embedding_distance, config.label_error_distance)
    chosen = by_embedding.choose_distance(config.embedding_distance, neighbours, labels, same_picture, verified_to)
    pairs = [pair for pair in neighbours if pair[2] <= chosen.distance]
    n = len(images.keys)
    largest = groups.largest_set(n, [(position[a], position[b]) for a, b, _ in pairs
                                     if a in position and b in position])
    share, counted = by_embedding.cross_label_share(pairs, labels, same_picture)
    problems = []
    if groups.is_chain(largest, n, config.max_group_share):
        problems.append(f"they join {largest} of the {n} images into one group ({largest / n:.0%}, over "
                        f"--max_group_share {config.max_group_share:g}) at distance {chosen.distance:g}")
    if share is not None and share > by_embedding.MAX_CROSS_LABEL_SHARE:
        problems.append(f"{share:.0%} of the {counted} labelled pairs within distance {chosen.distance:g} join "
                        f"different labels (over {by_embedding.MAX_CROSS_LABEL_SHARE:.0%}): the embeddings do not "
                        "separate the labels")
    suspects = by_embedding.suspected_label_errors([pair for pair in neighbours
                                                    if pair[2] <= config.label_error_distance], labels)
    summary = {"distance": chosen.distance, "distance_from": chosen.origin, "calibration": chosen.note,
               "pairs": len(pairs), "largest_group": largest,
               "cross_label_share": None if share is None else round(share, 4),
               "used": not problems, "problems": problems}
    return summary, pairs, suspects


def _report(config: Any, job_manifest: dict[str, Any], images: groups.Images, col: dict[str, list[Any]],
            found: list[groups.Group], per_image: list[list[str]], flagged: list[int], summary: dict[str, Any],
            moves: dict[str, str], suspect_positions: list[int], suspect_rows: list[dict[str, Any]]) -> str:
    from beam_pipeline.quality.thumbnails import thumbnails

    top, shown = config.report_top, config.report_images
    leaks = [g for g in found if g.leak][:top]
    conflicts = [g for g in found if g.conflict][:top]
    largest = found[:top]
    flag_lists = {name: [i for i in flagged if name in per_image[i]][:top] for name in summary["flagged_by_flag"]}
    wanted = {m for g in leaks + conflicts + largest for m in g.members[:shown]}
    wanted |= {i for lists in flag_lists.values() for i in lists}
    wanted |= set(suspect_positions[:top])
    preprocess = features.PreprocessConfig.from_dict(job_manifest["config"]["preprocess"])
    uris = thumbnails(OutputLayout(config.input_dir), preprocess,
                      [(col["shard"][i], col["index"][i], col["offset"][i]) for i in wanted])

    def figure(i: int, extra: str = "") -> report_html.Figure:
        caption = [col["source"][i], f"split: {images.splits[i]}" + (f" → {moves[images.keys[i]]}"
                                                                      if images.keys[i] in moves else ""),
                   f"label: {images.labels[i]}"] + ([extra] if extra else [])
        return report_html.Figure(uris.get((col["shard"][i], col["index"][i])), caption)

    def group_entry(group: groups.Group) -> report_html.Entry:
        distances = groups.distances_to_first(images, group)
        tags = [("exact" if group.exact else "near", "exact" if group.exact else "near")]
        tags += [("leak", "leak")] if group.leak else []
        tags += [("conflict", "label conflict")] if group.conflict else []
        figures = [figure(m, f"distance {d}") for m, d in list(zip(group.members, distances, strict=True))[:shown]]
        return report_html.Entry(f"group {group.group} · {len(group.members)} images", tags, figures,
                                 max(0, len(group.members) - shown))

    sections = [
        report_html.Section("leaks", "Cross-split leaks", summary["leaking_groups"], "groups",
                            [group_entry(g) for g in leaks],
                            "Groups with members in more than one split; clean_split.csv moves them into one."
                            if summary["clean_split"]["written"] else "Groups with members in more than one split; "
                            "clean_split.csv was not written (see the warnings above)."),
        report_html.Section("conflicts", "Label conflicts", summary["label_conflict_groups"], "groups",
                            [group_entry(g) for g in conflicts], "Groups whose members carry different labels."),
        report_html.Section("groups", "Duplicate groups", len(found), "groups", [group_entry(g) for g in largest],
                            "Largest first; full list in duplicate_groups.parquet."),
    ]
    if summary["suspected_label_errors"] is not None:
        entries = [report_html.Entry(col["source"][i], [("conflict", f"neighbours say {row['neighbour_label']}"
                                                         f" ({row['share']:.0%} of {row['neighbours']})")],
                                     [figure(i)]) for i, row in list(zip(suspect_positions, suspect_rows,
                                                                          strict=True))[:top]]
        sections.append(report_html.Section("label-errors", "Suspected label errors",
                                            summary["suspected_label_errors"], "images", entries,
                                            "Images whose embedding neighbours mostly carry another label."))
    for name, members in flag_lists.items():
        entries = [report_html.Entry(col["source"][i], [("", flag) for flag in per_image[i]], [figure(i)])
                   for i in members]
        sections.append(report_html.Section(f"flag-{name}", f"Flagged: {name}", summary["flagged_by_flag"][name],
                                            "images", entries))
    rows = [(name, summary[name]) for name in ("images", "exact_groups", "near_groups", "images_in_groups",
                                               "leaking_groups", "label_conflict_groups", "flagged_images")]
    if summary["suspected_label_errors"] is not None:
        rows += [("suspected_label_errors", summary["suspected_label_errors"]),
                 ("near pairs by embedding", summary["embedding_pairs"])]
    embedding = summary["embedding"]
    if embedding is not None:
        rows += [("embedding distance", f"{embedding['distance']:g} ({embedding['distance_from']}: "
                                        f"{embedding['calibration']})"),
                 ("embedding pairs used for the groups", "yes" if embedding["used"] else "no (see the warnings)")]
    clean = summary["clean_split"]
    rows += [("largest group", summary["largest_group"]),
             ("clean_split.csv", f"{clean['rows_moved']} rows moved" if clean["written"]
              else f"not written ({clean['rows_proposed']} rows would move)"),
             ("images per split before", split_counts(clean["images_before"])),
             ("images per split after the clean split", split_counts(clean["images_after"])),
             ("thresholds", json.dumps(summary["thresholds"]))]
    return report_html.render(f"Dataset quality: {config.input_dir}", rows, sections, summary["warnings"])


def write_findings(layout: QualityLayout, findings: Findings) -> None:
    """Writes every report file, summary.json last."""
    write_file(layout.path(layout.DUPLICATE_GROUPS_FILE), _parquet(findings.groups_table))
    write_file(layout.path(layout.IMAGE_FLAGS_FILE), _parquet(findings.flags_table))
    write_file(layout.path(layout.LABEL_ERRORS_FILE), _parquet(findings.label_errors_table))
    clean_path = layout.path(layout.CLEAN_SPLIT_FILE)
    if findings.clean_csv is not None:
        write_file(clean_path, findings.clean_csv.encode("utf-8"))
    elif FileSystems.exists(clean_path):  # Never leave an earlier run's clean split beside a refusal.
        FileSystems.delete([clean_path])
    write_file(layout.path(layout.REPORT_FILE), findings.report.encode("utf-8"))
    write_file(layout.path(layout.SUMMARY_FILE),
               json.dumps(findings.summary, ensure_ascii=False, indent=2).encode("utf-8"))


def format_summary(summary: dict[str, Any], layout: QualityLayout) -> str:
    """The lines printed at the end of a run."""
    flags = ", ".join(f"{name} {count}" for name, count in summary["flagged_by_flag"].items())
    return "\n".join([
        # rows_failed: rows the job stored no image for, and rows of a job shard that failed its checks here.
        f"Images: {summary['images']} ({summary['rows_failed']} rows of the job not measured: no stored image, "
        "or a damaged shard; each is in the job's or this run's errors.jsonl)",
        f"Duplicate groups: {summary['exact_groups']} exact, {summary['near_groups']} near, "
        f"{summary['images_in_groups']} images in groups ({summary['duplicate_images']} beyond the first of each)",
        f"Cross-split leaks: {summary['leaking_groups']} groups; label conflicts: "
        f"{summary['label_conflict_groups']} groups",
        f"Flagged images: {summary['flagged_images']} ({flags})",
        *([f"Suspected label errors: {summary['suspected_label_errors']}; near pairs by embedding: "
           f"{summary['embedding_pairs']}"] if summary.get("suspected_label_errors") is not None else []),
        *([f"Embeddings: distance {embedding['distance']:g} ({embedding['distance_from']}), {embedding['pairs']} "
           f"pairs, {'used' if embedding['used'] else 'NOT used'} for the groups"]
          if (embedding := summary.get("embedding")) else []),
        clean_split_line(summary["clean_split"], layout.path(layout.CLEAN_SPLIT_FILE)),
        *(f"Warning: {warning}" for warning in summary.get("warnings", [])),
        f"Report: {layout.path(layout.REPORT_FILE)}",
    ])


def split_counts(counts: dict[str, int]) -> str:
    """'train 256, validation 64': images per split."""
    return ", ".join(f"{split} {count}" for split, count in sorted(counts.items()))


def clean_split_line(clean: dict[str, Any], path: str) -> str:
    """One line: what the clean split moved (images per split before and after), or that it was not written."""
    if not clean.get("written", True):
        return (f"Clean split: NOT written ({clean['rows_proposed']} rows would move; images per split "
                f"{split_counts(clean['images_before'])}): see the warning below")
    counts = (f"; images per split {split_counts(clean['images_before'])} -> {split_counts(clean['images_after'])}"
              if "images_before" in clean else "")
    return f"Clean split: {clean['rows']} rows, {clean['rows_moved']} moved{counts}, in {path}"
