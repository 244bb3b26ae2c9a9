"""What the quality command does around its pipeline: check the job output, signals and pairs, findings."""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any

from beam_pipeline.common import terminal
from beam_pipeline.common.files import delete_tree, file_digest, file_digest_or_none
from beam_pipeline.common.launcher import Launcher, Refused
from tf_serving_input.layout import QualityLayout


class QualityLauncher(Launcher[QualityLayout]):
    """The quality job's run: the shared skeleton (lock, resume, one-line errors), its pipeline, the findings."""

    def __init__(self, config: Any, beam_args: list[str], pipeline_options: Any, layout: QualityLayout) -> None:
        super().__init__(layout, beam_args, pipeline_options, config)
        self.config = config
        self.job_manifest: dict[str, Any] | None = None
        self.predictions_manifest: dict[str, Any] | None = None
        self.csv_keys: list[str] = []  # The job's CSV rows' keys in file order, read by `check`.

    def first_step(self) -> str:
        return f"reading the job output {self.config.input_dir}"

    def check(self, step: Any) -> None:
        from beam_pipeline.inputs import rows as csv_rows
        from tf_serving_input.layout import OutputLayout

        layout = OutputLayout(self.config.input_dir)
        try:
            self.job_manifest = layout.load_manifest()
        except (FileNotFoundError, PermissionError) as error:
            raise Refused(str(error)) from None
        except ValueError as error:  # A damaged manifest.json (JSON that does not parse).
            raise Refused(f"{layout.manifest_file} is damaged ({error}): rerun the preprocessing job to rewrite it, "
                          "or restore it") from None
        job, output = (self.config.input_dir.rstrip("/") + "/", self.config.output_dir.rstrip("/") + "/")
        if output.startswith(job):
            raise Refused(f"--output_dir {self.config.output_dir} is inside the job's own folder "
                          f"{self.config.input_dir}: choose another one (the job's output is never written to)")
        if self.config.predictions_dir:
            self.check_predictions()
        csv_path = self.job_manifest["config"]["input_csv"]
        step.now(f"reading the job's CSV {csv_path}")
        # The clean split rewrites this CSV: refused now, naming the line, if it cannot be read. The rows'
        # keys are kept (~70 bytes a row): the findings sort by them without reading the CSV again.
        self.csv_keys = csv_rows.row_keys(csv_path, csv_rows.CsvColumns(**self.job_manifest["config"]["columns"]),
                                          csv_rows.ColumnReading(input_format=self.job_manifest["config"].get(
                                              "input_format", "")))
        changed = csv_change_since_job(layout, self.job_manifest, csv_path, len(self.csv_keys))
        if changed:
            raise Refused(changed)

    def check_predictions(self) -> None:
        """The predictions must be of this job output and hold embeddings; Refused otherwise."""
        from beam_pipeline.common.job_shards import job_dataset_id
        from tf_serving_input.layout import PredictionLayout

        try:
            manifest = PredictionLayout(self.config.predictions_dir).load_manifest()
        except FileNotFoundError as error:
            raise Refused(str(error)) from None
        if manifest.get("dataset", {}).get("id") != job_dataset_id(self.job_manifest):
            raise Refused(f"{self.config.predictions_dir} holds predictions of another input than "
                          f"{self.config.input_dir}: run the predict job with --input_dir {self.config.input_dir}")
        if not manifest.get("model", {}).get("embedding_size"):
            raise Refused(f"{self.config.predictions_dir} holds no embeddings (an export without an embedding "
                          "layer): drop --predictions_dir or predict with an export that has one")
        self.predictions_manifest = manifest

    def prediction_files(self) -> list[str]:
        """The predictions' Parquet shards (empty without --predictions_dir)."""
        from tf_serving_input.layout import PredictionLayout

        if self.predictions_manifest is None:
            return []
        layout = PredictionLayout(self.config.predictions_dir)
        return [layout.path(shard["file"]) for shard in self.predictions_manifest["shards"]]

    def fingerprint(self) -> dict[str, Any]:
        """The configuration and the inputs' checksums: the same input, the same thresholds."""
        from beam_pipeline.common.job_shards import job_input_sha256

        predictions = ([(s["file"], s.get("sha256")) for s in self.predictions_manifest["shards"]]
                       if self.predictions_manifest else None)
        return {"config": self.config.to_dict(), "input_sha256": job_input_sha256(self.job_manifest),
                "predictions_sha256": predictions and hashlib.sha256(json.dumps(predictions).encode()).hexdigest()}

    def print_summary(self, summary: dict[str, Any]) -> None:
        """The run's result on stdout: the summary's lines, or (--format json) summary.json's figures."""
        from beam_pipeline.quality.findings import format_summary

        if self.config.summary_format == "json":
            terminal.print_json({**summary, "output_dir": self.layout.root,
                                 "report": self.layout.path(self.layout.REPORT_FILE)})
        else:
            terminal.result(format_summary(summary, self.layout))

    def locked(self, step: Any, run_log: Any) -> int:
        """A finished run of the same input and thresholds is a no-op; otherwise prepare (resume) and run."""
        from apache_beam.io.filesystems import FileSystems

        from beam_pipeline.common.files import read_json
        from tf_serving_input.failures import INPUT_SHARD_DAMAGED

        layout = self.layout
        # clean_split.csv is absent when it was refused (findings.py): the manifest's outputs say what was written.
        finished = [layout.path(name) for name in (*layout.reports(), layout.MANIFEST_FILE)
                    if name != layout.CLEAN_SPLIT_FILE]
        manifest = (layout.load_manifest() if not self.config.overwrite
                    and all(FileSystems.exists(path) for path in finished)
                    and read_json(layout.run_file) == self.fingerprint() else None)
        # A run that found job shards damaged checks them again (repaired since, or failing again).
        if manifest is not None and not manifest.get("failed_by_reason", {}).get(INPUT_SHARD_DAMAGED):
            damaged = damaged_outputs(layout, manifest)
            if damaged:
                terminal.notice(f"note: {damaged[0]} does not match the SHA-256 the manifest recorded"
                                f"{f' (and {len(damaged) - 1} more)' if len(damaged) > 1 else ''}: writing the "
                                "findings again")
                return super().locked(step, run_log)
            terminal.notice(f"Nothing to do: {layout.root} already holds this run's finished output (same input "
                            "and thresholds); pass --overwrite to redo it")
            self.print_summary(manifest["summary"])
            return self.error_budget_code(manifest)  # A run over --max_error_rate fails again, as it did.
        return super().locked(step, run_log)

    def run(self, finished_earlier: int, step: Any, run_log: Any) -> int:

        from beam_pipeline.common import report
        from beam_pipeline.common.job_shards import record_shards
        from beam_pipeline.quality import findings
        from beam_pipeline.quality.pipeline import build_quality_pipeline
        from tf_serving_input.layout import OutputLayout

        config, layout = self.config, self.layout
        shards = record_shards(OutputLayout(config.input_dir), self.job_manifest)
        names = [shard.name for shard in shards]
        total = sum(shard.rows for shard in shards)
        self.announce(f"Measuring {total} images of {config.input_dir} ({len(shards)} shards), then finding pairs "
                      f"within {config.hash_distance} bits (bands of {config.hash_band_bits} bits every "
                      f"{config.hash_band_step}); writing to {config.output_dir}", finished_earlier)
        delete_tree([layout.path(layout.PAIRS_DIR)])  # Left by a killed run: the pairs are redone.
        preprocess = self.job_manifest["config"]["preprocess"]
        pipeline_seconds = self.run_pipeline(
            step, run_log, f"computing signals into {layout.data_dir} and pairs into {layout.path(layout.PAIRS_DIR)}",
            lambda pipeline: build_quality_pipeline(pipeline, layout, preprocess, shards, config.hash_distance,
                                                    config.hash_band_bits, config.hash_band_step, config.max_bucket,
                                                    config.near_constant_contrast, self.prediction_files(),
                                                    config.embedding_hash_distance),
            len(shards), total, then="finding near-duplicate pairs")
        statuses = self.verified_statuses(step, names)
        if statuses is None:
            return 1
        step.now(f"writing the findings to {layout.root}")
        summary_counts, failures = report.summarize_statuses(statuses)
        found = findings.analyze(config, layout, self.job_manifest, names, summary_counts["failed"],
                                 self.csv_keys, self.prediction_files())
        findings.write_findings(layout, found)
        manifest = {
            "rows": summary_counts["rows"], "measured": summary_counts["written"],
            "failed": summary_counts["failed"], "failed_by_reason": summary_counts["failed_by_reason"],
            "shards": summary_counts["shards"], "summary": found.summary, "config": config.to_dict(),
            "seconds": {"pipeline": round(pipeline_seconds, 3)},
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": report.library_versions(),
            # Each output's SHA-256: a rerun and the UI check them (a flipped byte in a Parquet often still reads).
            "outputs": {name: file_digest(layout.path(name)) for name in layout.reports()
                        if name != layout.CLEAN_SPLIT_FILE or found.clean_csv is not None},
        }
        report.write_outputs(layout, manifest, failures)
        self.print_summary(found.summary)
        return self.error_budget_code(manifest)


def csv_change_since_job(job_layout: Any, job_manifest: dict[str, Any], csv_path: str, rows: int) -> str | None:
    """Why the job's CSV is not the one the job read (one line), or None when it is.

    clean_split.csv rewrites that CSV row by row, matched by the rows' keys (position and path): a row added
    or removed since the job shifts every later key, and the clean split would silently drop measured rows
    or keep unmeasured ones. The job's run.json records the CSV's SHA-256; without it (deleted, or an
    output of an older version) the row count in its manifest still catches added and removed rows.
    """
    from beam_pipeline.common.files import read_json

    redo = "restore the CSV the job read, or rerun the preprocessing job on this one"
    recorded = (read_json(job_layout.run_file) or {}).get("input_csv_sha256")
    if recorded is not None and _list_digest_or_none(csv_path, job_manifest["config"]) != recorded:
        return (f"the job's CSV {csv_path} changed since the job read it (its SHA-256 is not the one "
                f"{job_layout.run_file} records), and clean_split.csv rewrites it row by row: {redo}")
    if rows != job_manifest.get("rows", rows):
        return (f"the job's CSV {csv_path} has {rows} rows, not the {job_manifest['rows']} the job read "
                f"({job_layout.manifest_file}), and clean_split.csv rewrites it row by row: {redo}")
    return None


def _list_digest_or_none(csv_path: str, job_config: dict[str, Any]) -> str | None:
    """The digest the job's run.json records of its list (every file of a folder or glob), or None when unreadable."""
    from beam_pipeline.inputs.tables import list_digest

    try:
        return list_digest(csv_path, job_config.get("input_format", ""))
    except Exception:  # noqa: BLE001 - absent or unreadable: the list changed.
        return None


def damaged_outputs(layout: Any, manifest: dict[str, Any]) -> list[str]:
    """The output files whose content differs from the SHA-256 the manifest recorded (or that are missing)."""
    recorded = manifest.get("outputs") or {}
    if not recorded:
        return [layout.manifest_file]  # Written by an earlier version, which recorded none: redo.
    return [layout.path(name) for name, sha256 in recorded.items()
            if file_digest_or_none(layout.path(name)) != sha256]
