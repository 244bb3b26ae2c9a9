"""What the predict command does around its pipelines: check the inputs, run, report, load the database."""

import dataclasses
import hashlib
import json
import os
import sys
import time

from beam_pipeline.common import flags, spark, terminal
from beam_pipeline.common.files import export_sha256
from beam_pipeline.common.launcher import Launcher, Refused
from beam_pipeline.inputs import rows as csv_source
from tf_serving_input.failures import INPUT_SHARD_DAMAGED

# The predict job's refusals are the shared launcher's (exit 2, nothing done).
RefusedError = Refused


# Runners whose workers run on this machine, so they reach the embedded server's Unix socket.
_LOCAL_FLINK_MASTERS = ("[local]", "[auto]")


def workers_on_this_machine(beam_args):
    """Whether the runner's workers run on this machine (and can reach the embedded database)."""
    value = flags.flag_value
    runner = (value(beam_args, "runner") or "").lower()
    if value(beam_args, "environment_type") in ("DOCKER", "docker"):
        return False
    if runner in (name.lower() for name in flags.LOCAL_RUNNERS):
        return True
    if runner in ("flinkrunner", "flink"):
        master = value(beam_args, "flink_master") or "[auto]"
        return master in _LOCAL_FLINK_MASTERS or master.startswith(("localhost", "127."))
    if runner in spark.SPARK_RUNNERS:  # An in-process Spark (local[N]) or a cluster on the loopback.
        return all(host in spark.LOOPBACK_HOSTS for host, _ in spark.master_addresses(spark.master_url(beam_args)))
    if runner in ("portablerunner", "portable"):
        return (value(beam_args, "job_endpoint") or "localhost").startswith(("localhost", "127.", "embed"))
    return False


class PredictLauncher(Launcher):
    """What the predict job adds to the shared run: the export, the input, the database."""

    def __init__(self, config, beam_args, pipeline_options, layout):
        super().__init__(layout, beam_args, pipeline_options, config)
        self.config = config
        self.export = None
        self.job_manifest = None
        self.csv_summary = None
        self._fingerprint = None

    # ------------------------------------------------------------------ before any work
    def first_step(self):
        return f"reading the export {self.config.model_dir}"

    def check(self, step):
        from beam_pipeline import database

        self.check_inputs()
        step.now(f"checking the table {self.config.table} in {database.describe(self.config.database)}")
        self.check_database()

    def failure_line(self, error, run_log):
        from beam_pipeline import database

        if not isinstance(error, database.DatabaseError):
            return None
        run_log.write(error)
        hint = "" if self.config.load_only else ("; the Parquet output is kept: load it later with the same command "
                                                 "and --load_only")
        return f"error: {error}{hint}"

    def locked(self, step, run_log):
        if self.config.load_only:
            return self.load(step, run_log)
        return super().locked(step, run_log)

    def check_inputs(self):
        """Reads the export's description and the input; raises RefusedError naming what is wrong."""
        from tf_serving_input.serving import read_export_info

        config = self.config
        try:
            self.export = read_export_info(config.model_dir)
        except (FileNotFoundError, ValueError) as error:
            raise RefusedError(str(error)) from None
        if config.database == "embedded" and not workers_on_this_machine(self.beam_args):
            raise RefusedError("--database embedded is a server on this machine, which this runner's workers "
                               "cannot reach: pass --database postgresql://USER:PASSWORD@HOST/DB (Cloud SQL, "
                               "AlloyDB or any PostgreSQL with pgvector), or --database none")
        if config.database != "none" and not self.export.embedding_size:
            raise RefusedError(f"{config.model_dir} has no embedding output (exported with embedding_layer=False): "
                               "re-export it with one, or pass --database none")
        if config.load_only:
            return
        if config.input_dir:
            self._check_job_output()
        elif self.export.steps_outside:  # Raw images would need the run's Python steps, which it cannot hold.
            python = next(step for step in self.export.image_steps if step.kind == "python")
            raise RefusedError(f"{config.model_dir} takes images after the run's steps (its step "
                               f"{python.position + 1}, {python.spec}, is a Python step): predict the job "
                               "output made with them (--input_dir), not raw images (--input_csv)")
        else:
            self.csv_summary = csv_source.summarize_csv(config.input_csv, config.columns, config.column_reading)

    def _check_job_output(self):
        from tf_serving_input.layout import OutputLayout

        try:
            self.job_manifest = OutputLayout(self.config.input_dir).load_manifest()
        except (FileNotFoundError, PermissionError) as error:
            raise RefusedError(str(error)) from None
        job_preprocess = self.job_manifest["config"]["preprocess"]
        if job_preprocess != self.export.preprocess:
            raise RefusedError(
                f"{self.config.model_dir} was exported for another preprocessing than {self.config.input_dir} "
                f"holds (export: {json.dumps(self.export.preprocess, sort_keys=True)}; job: "
                f"{json.dumps(job_preprocess, sort_keys=True)}): use --input_csv with the raw images, or "
                "export the model on this job's output")

    def signature(self):
        """(signature, input name) this run feeds: the job's records, or raw image bytes."""
        return self.export.signature(records=self.config.input_dir is not None)

    def model_spec(self):
        """What the pipeline needs to know of the model."""
        from beam_pipeline.predict.pipeline import ModelSpec

        signature, input_name = self.signature()
        return ModelSpec(signature=signature, input_name=input_name, vocabulary=self.export.vocabulary,
                         embedding_size=self.export.embedding_size)

    def fingerprint(self):
        """What makes two runs the same run: configuration, model files and input content (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        return self._fingerprint

    def _compute_fingerprint(self):
        model_sha256 = export_sha256(self.config.model_dir)
        if self.job_manifest is not None:
            from beam_pipeline.common.job_shards import job_input_sha256

            source = job_input_sha256(self.job_manifest)
        else:
            from beam_pipeline.inputs.tables import list_digest

            source = list_digest(self.config.input_csv, self.config.input_format)
        return {"config": self.config.to_dict(), "model_sha256": model_sha256, "input_sha256": source}

    def dataset(self, fingerprint):
        """What the database records of this run's input: {"id", "source", "model_sha256", "model_dir"}.

        The id names the input's content: a job output by its shards' checksums (the same images
        preprocessed the same way, wherever the folder is), a CSV by its content and its folder
        (relative paths resolve against it, so the same text elsewhere is another dataset).
        """
        import posixpath

        config = self.config
        if self.job_manifest is not None:
            from beam_pipeline.common.job_shards import job_dataset_id

            dataset_id, source = job_dataset_id(self.job_manifest), config.input_dir
        else:
            folder = (posixpath.dirname(config.input_csv) if "://" in config.input_csv
                      else os.path.dirname(os.path.abspath(config.input_csv)))
            content, source = f"csv\0{fingerprint['input_sha256']}\0{folder}", config.input_csv
            dataset_id = hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]
        return {"id": dataset_id, "source": source,
                "model_sha256": fingerprint["model_sha256"], "model_dir": config.model_dir}

    # ------------------------------------------------------------------ the run
    def _tasks(self):
        """(config for the pipeline, RecordShards or None, expected shard names, rows per split)."""
        import dataclasses

        from beam_pipeline.common.job_shards import record_shards
        from beam_pipeline.inputs.rows import all_shard_keys, shard_counts_for
        from tf_serving_input.layout import OutputLayout, shard_name

        config = self.config
        if self.job_manifest is not None:
            shards = record_shards(OutputLayout(config.input_dir), self.job_manifest)
            config = dataclasses.replace(config, job_input_csv=self.job_manifest["config"]["input_csv"],
                                         job_features=self.job_manifest["config"].get("features"))
            rows = {}
            for shard in shards:
                rows[shard.split] = rows.get(shard.split, 0) + shard.rows
            return config, shards, [shard.name for shard in shards], rows
        counts = shard_counts_for(config.num_shards, self.csv_summary)
        config = dataclasses.replace(config, shard_counts=counts)
        names = [shard_name(split, index, counts[split]) for split, index in all_shard_keys(counts)]
        return config, None, names, self.csv_summary.rows_per_split

    def run(self, finished_earlier, step, run_log):
        from apache_beam.options.pipeline_options import StandardOptions

        from beam_pipeline.common import report
        from beam_pipeline.predict.pipeline import build_predict_pipeline

        config, shards, names, rows_per_split = self._tasks()
        total = sum(rows_per_split.values())
        source = config.input_dir or config.input_csv
        self.announce(f"Predicting {total} images from {source} with {config.model_dir} "
                      f"({self.signature()[0]}, batch {config.batch_size}); writing {len(names)} shards "
                      f"to {config.output_dir}", finished_earlier)
        spec = self.model_spec()
        wall_seconds = self.run_pipeline(step, run_log, f"predicting into {self.layout.data_dir}",
                                         lambda pipeline: build_predict_pipeline(pipeline, config, spec, shards),
                                         len(names), total)
        statuses = self.verified_statuses(step, names)
        if statuses is None:
            return 1
        step.now(f"writing the manifest to {self.layout.root}")
        runner = self.pipeline_options.view_as(StandardOptions).runner
        manifest, failures = self._manifest(statuses, wall_seconds, runner)
        report.write_outputs(self.layout, manifest, failures)
        terminal.result(report.format_prediction_summary(manifest, self.layout))
        code = 0
        if config.database != "none":
            step.now(f"loading the predictions into {config.database}")
            code = self._load(manifest, step, run_log)
        damaged = sorted({f["source"]: f["detail"] for f in failures
                          if f["reason"] == INPUT_SHARD_DAMAGED}.items())
        if damaged:
            print(f"error: {len(damaged)} input shard(s) failed verification and were not predicted "
                  f"({sum(1 for f in failures if f['reason'] == INPUT_SHARD_DAMAGED)} rows, "
                  f"listed in {self.layout.errors_file}): {damaged[0][1]}"
                  f"{f' (and {len(damaged) - 1} more)' if len(damaged) > 1 else ''}; then run this command again",
                  file=sys.stderr)
            return 1
        return code or self.error_budget_code(manifest)

    def _manifest(self, statuses, wall_seconds, runner):
        import datetime

        from beam_pipeline.common import report

        summary, failures = report.summarize_statuses(statuses)
        config = self.config
        manifest = {
            "rows": summary["rows"], "predicted": summary["written"], "failed": summary["failed"],
            "splits": summary["splits"], "failed_by_reason": summary["failed_by_reason"],
            "shards": summary["shards"],
            "dataset": self.dataset(self.fingerprint()),
            "model": {"model_dir": config.model_dir, "signature": self.signature()[0],
                      "embedding_size": self.export.embedding_size, "embedding_dtype": config.embedding_dtype,
                      "embedding_layer": self.export.embedding_layer, "top_k": config.top_k,
                      "vocabulary": self.export.vocabulary},
            "config": config.to_dict(), "runner": runner, "wall_seconds": round(wall_seconds, 3),
            "images_per_second": round(summary["written"] / wall_seconds, 2) if wall_seconds > 0 else None,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "versions": report.library_versions(),
        }
        return manifest, failures

    # ------------------------------------------------------------------ the database
    def check_database(self):
        """Before any work: a table that would refuse these predictions refuses them now (RefusedError).

        A database that cannot be reached is only a warning: the Parquet output is kept either way.
        """
        from beam_pipeline import database

        config = self.config
        if config.database == database.NONE or config.load_only:
            return
        try:
            url, server = database.resolve(config.database, config.database_dir)
        except database.DatabaseError as error:
            terminal.notice(f"warning: {error}; predicting anyway: the Parquet output will be kept, and loaded "
                            "later with --load_only")
            return
        try:
            database.check_table_accepts(url, config.table, self.export.embedding_size, config.embedding_dtype,
                                         self.dataset(self.fingerprint()), append=config.append)
        except database.TableRefused as error:
            raise RefusedError(str(error)) from None
        except database.DatabaseError as error:
            terminal.notice(f"warning: {error}; predicting anyway: the Parquet output will be kept, and loaded "
                            "later with --load_only")
        finally:
            if server is not None:
                server.release()

    def load(self, step, run_log):
        """--load_only: loads the Parquet output of an earlier run; returns the exit code."""
        try:
            manifest = self.layout.load_manifest()
        except FileNotFoundError as error:
            raise RefusedError(f"{error} (--load_only loads the output of a finished predict run)") from None
        if "dataset" not in manifest:
            raise RefusedError(f"{self.layout.manifest_file} was written by an earlier version, which recorded no "
                               "dataset id: run the predict command again (without --load_only) to rewrite it")
        step.now(f"loading the predictions into {self.config.database}")
        return self._load(manifest, step, run_log)

    def _load(self, manifest, step, run_log):
        """Verifies and upserts every Parquet shard, builds the index, records the load; returns the exit code."""
        from apache_beam.options.pipeline_options import PipelineOptions

        from beam_pipeline import database
        from beam_pipeline.common import report, runners
        from beam_pipeline.common.files import read_json
        from beam_pipeline.predict.load import build_load_pipeline, load_tasks

        config = self.config
        model, dataset = manifest["model"], manifest["dataset"]
        tasks = load_tasks(self.layout, manifest)
        url, server = database.resolve(config.database, config.database_dir)
        try:
            target = database.describe(url)
            database.prepare_table(url, config.table, model["embedding_size"], model["embedding_dtype"], dataset,
                                   append=config.append)
            index_settings = config.index or database.IndexSettings()
            if index_settings.rebuild and database.drop_index(url, config.table):
                terminal.notice(f"dropped the index of table {config.table}: built again after the load "
                                "(--rebuild_index)")
            seconds = self.run_pipeline(
                step, run_log, f"loading the predictions into {target}",
                lambda pipeline: build_load_pipeline(pipeline, config.output_dir, tasks, url, config.table,
                                                     dataset["id"]),
                options=PipelineOptions(runners.for_io_bound_work(self.beam_args)))
            results = [read_json(self.layout.load_result_file(config.table, task.name)) or
                       {"name": task.name, "loaded": 0, "failed": [], "problem": "the load left no result"}
                       for task in tasks]
            step.now(f"building the HNSW index of table {config.table} in {target}")
            index_started = time.monotonic()
            index = database.create_index(url, config.table, dataclasses.replace(index_settings, rebuild=False),
                                          progress=terminal.notice if config.progress else None)
            index_seconds = time.monotonic() - index_started
            asked = f"m='{index_settings.m}'", f"ef_construction='{index_settings.ef_construction}'"
            if not all(option in index for option in asked):
                terminal.notice(f"note: table {config.table} keeps the index it had ({index.split(' WITH ')[-1]}): "
                                f"--hnsw_m and --hnsw_ef_construction apply when it is built; --rebuild_index "
                                "builds it again with them")
            in_table = database.count_rows(url, config.table)
            of_dataset = database.count_rows(url, config.table, dataset["id"])
        finally:
            if server is not None:
                server.release()
        loaded = sum(result["loaded"] for result in results)
        left_out = [record for result in results for record in result["failed"]]
        problems = [(result["name"], result["problem"]) for result in results if result["problem"]]
        report.write_jsonl(self.layout.load_errors_file, left_out)
        manifest["database"] = {
            "target": target, "table": config.table, "dataset": dataset["id"], "loaded_rows": loaded,
            "left_out_rows": len(left_out), "shards_not_loaded": len(problems), "rows_of_dataset": of_dataset,
            "rows_in_table": in_table, "index": index, "load_seconds": round(seconds, 3),
            "index_seconds": round(index_seconds, 3)}
        report.write_manifest(self.layout, manifest)
        terminal.result(f"Loaded {loaded} rows into table {config.table} at {target} in {seconds:.1f} s "
                        f"(dataset {dataset['id']}: {of_dataset} rows; {in_table} rows in the table); index ready "
                        f"in {index_seconds:.1f} s: {index}")
        if left_out:
            print(f"warning: {len(left_out)} row(s) were left out of the table (text it cannot store), listed in "
                  f"{self.layout.load_errors_file}", file=sys.stderr)
        if problems:
            name, problem = problems[0]
            print(f"error: {len(problems)} of {len(tasks)} shard(s) were not loaded: {name}: {problem}"
                  f"{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}; a damaged shard is rewritten "
                  "by the predict command without --load_only, then load again", file=sys.stderr)
            return 1
        return 0

