"""Everything the UI reads once before it listens: the run's folders, the record index, the model, the pool.

What cannot be used is refused here with one line (exit 1), not at the first request; run folders that do not
fit together (another run's predictions or quality folder, a link out of a run folder) exit 2, as bad input.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from beam_pipeline import database
from beam_pipeline.ui.app import UiState
from beam_pipeline.ui.neighbours import NeighbourSearch
from beam_pipeline.ui.quality import QualityRun
from beam_pipeline.ui.run_data import JobRun, PredictRun
from tf_serving_input.layout import OutputLayout

POOL_SIZE = 8  # Connections: the thread pool runs up to 40 requests at once, each holds one for a query.


class StartupError(RuntimeError):
    """The UI cannot serve what its flags name; the message says why in one line."""


class RunRefused(StartupError):
    """The folders given do not fit together, or one leads outside itself: refused like a bad flag (exit 2)."""


@dataclasses.dataclass
class Resources:
    """What the UI holds while it runs and gives back when it stops."""

    pool: Any = None
    server: Any = None  # An EmbeddedServer lease.

    def close(self) -> None:
        """Closes the pool, then gives the embedded server's lease back."""
        if self.pool is not None:
            self.pool.close()
        if self.server is not None:
            self.server.release()


def load_state(args: Any, database_value: str | None) -> tuple[UiState, Resources]:
    """(UiState, Resources) for the parsed flags; StartupError (or DatabaseError, ExportError) when it cannot."""
    check_no_link_leads_out(args)
    manifest = OutputLayout(args.input_dir).load_manifest()
    predict = PredictRun(args.predictions_dir) if args.predictions_dir else None
    # Before the image index (which a first start builds) and the quality folder's tables are read.
    _check_same_input(args, manifest, predict)
    quality = QualityRun(args.quality_dir) if args.quality_dir else None
    job = JobRun(args.input_dir, manifest=manifest)
    if not job.image_count:
        raise StartupError(f"--input_dir {args.input_dir} holds no stored image")
    state = UiState(job=job, max_file_bytes=args.max_file_bytes, upload_timeout=args.upload_timeout,
                    upload_read_timeout=args.upload_read_timeout)
    state.predict, state.quality = predict, quality
    if state.quality is not None:  # Its groups and flags as rows of the image index: the gallery's filters.
        state.quality.attach(job.index.keys)
    resources = Resources()
    if database_value is None:
        return state, resources
    try:
        try:  # The UI only reads: a --database_dir holding no database is refused, and nothing is created there.
            url, resources.server = database.resolve(database_value, args.database_dir, create=False)
        except database.NoDatabase as error:
            raise RunRefused(str(error)) from None
        table = _table(args, state.predict, url)
        resources.pool = database.open_pool(url, max_size=POOL_SIZE)
        datasets = _datasets(resources.pool, table)
        dataset = state.predict.dataset_id if state.predict else None
        if dataset is not None and datasets and dataset not in datasets:
            raise RunRefused(f"table {table} holds no rows of --predictions_dir {args.predictions_dir} (its "
                             f"dataset {dataset}; the table holds {', '.join(sorted(datasets))}): name its table "
                             "with --table, or load it with the predict job's --load_only")
        embedder = _embedder(args.model_dir, resources.pool, table, args.image_step) if args.model_dir else None
    except BaseException:
        resources.close()
        raise
    from beam_pipeline.common.job_shards import job_dataset_id

    state.search = NeighbourSearch(resources.pool, table, dataset, embedder, job.index.config.max_pixels, datasets,
                                   job_dataset_id(job.manifest))
    return state, resources


def _datasets(pool: Any, table: str) -> dict[str, str]:
    """{dataset id: source} of what `table` holds (`beam_image_pipeline_datasets`); empty for a table from before
    that record."""
    import psycopg

    with pool.connection() as connection:
        try:
            return dict(database.datasets_in(connection, table))
        except psycopg.errors.UndefinedTable:
            return {}


def check_no_link_leads_out(args: Any) -> None:
    """RunRefused naming the first file the UI would open under --input_dir, --predictions_dir or --quality_dir
    that is a link (or lies under one) leading outside that folder.

    A run folder is what the UI was asked to show; a link in it to `/home/someone/.ssh/...` or to another run's
    shard is never followed. A folder that is itself a link is fine: what counts is where its files lie.
    """
    import glob

    from tf_serving_input.layout import OutputLayout, PredictionLayout, QualityLayout

    job = OutputLayout(args.input_dir)
    _inside("--input_dir", job.root, [job.manifest_file, job.errors_file, job.index_file, job.index_record_file])
    if os.path.isfile(job.manifest_file):  # A missing one is named by the job output's own check.
        manifest = job.load_manifest()
        shards = manifest.get("shards") if isinstance(manifest, dict) else None
        _inside("--input_dir", job.root, [job.path(shard["file"]) for shard in shards or []
                                         if isinstance(shard, dict) and isinstance(shard.get("file"), str)])
    if args.predictions_dir:
        predictions = PredictionLayout(args.predictions_dir)
        _inside("--predictions_dir", predictions.root,
                [predictions.manifest_file, *sorted(glob.glob(predictions.shard_files_glob()))])
    if args.quality_dir:
        quality = QualityLayout(args.quality_dir)
        _inside("--quality_dir", quality.root, [quality.run_file, *(quality.path(name) for name in (
            quality.MANIFEST_FILE, quality.DUPLICATE_GROUPS_FILE, quality.IMAGE_FLAGS_FILE, quality.SUMMARY_FILE))])


def _inside(flag: str, root: str, paths: list[str]) -> None:
    """RunRefused when one of `paths` (under `root`) resolves outside `root`; paths that do not exist are left to
    the checks that read them."""
    top = os.path.realpath(root)
    for path in paths:
        if not os.path.lexists(path):
            continue
        target = os.path.realpath(path)
        if os.path.commonpath([top, target]) != top:
            raise RunRefused(f"{flag} {root}: {os.path.relpath(path, root)} is a link that leads outside the "
                             f"folder (to {target}); the UI opens no file outside a run folder: copy the file in")


def _check_same_input(args: Any, job_manifest: dict, predict: PredictRun | None) -> None:
    """StartupError when --predictions_dir or --quality_dir was made from another job output than --input_dir.

    Their pages would otherwise show another dataset's top-k, duplicates and leaks beside this run's images.
    """
    from beam_pipeline.common.files import read_json
    from beam_pipeline.common.job_shards import job_dataset_id, job_input_sha256
    from tf_serving_input.layout import QualityLayout

    if predict is not None and not (isinstance(predict.dataset_id, str) and predict.dataset_id):
        raise RunRefused(f"--predictions_dir {args.predictions_dir}: its manifest.json names no dataset id, so the "
                         "input its predictions were made from is unknown: rerun the predict job to rewrite it")
    if predict is not None and predict.dataset_id != job_dataset_id(job_manifest):
        made_from = predict.source or "another input"
        raise RunRefused(f"--predictions_dir {args.predictions_dir} holds predictions of {made_from} (dataset "
                         f"{predict.dataset_id}), not of --input_dir {args.input_dir}: give the predict job's "
                         "folder of this one")
    if args.quality_dir:
        run_file = QualityLayout(args.quality_dir).run_file
        # A regular file only: a FIFO or a device there would block start-up on its read.
        recorded = read_json(run_file) if os.path.isfile(run_file) else None
        if not isinstance(recorded, dict) or not isinstance(recorded.get("input_sha256"), str):
            raise RunRefused(f"{run_file} is missing or damaged, so the quality folder's input is unknown: rerun "
                               "the quality command to rewrite it")
        if recorded["input_sha256"] != job_input_sha256(job_manifest):
            raise RunRefused(f"--quality_dir {args.quality_dir} is the quality job's output of another job output "
                               f"than --input_dir {args.input_dir} ({run_file} names other shards): run the quality "
                               f"command on --input_dir {args.input_dir}")


def _table(args: Any, predict: PredictRun | None, url: str) -> str:
    """The table named by --table, else the predict manifest's, else the only table of embeddings."""
    table = args.table or (predict.table if predict else None)
    tables = database.vector_tables(url)
    if table is None:
        if len(tables) != 1:
            raise StartupError(f"{database.describe(url)} holds {len(tables)} tables of embeddings "
                               f"({', '.join(tables) or 'none'}): name one with --table")
        return tables[0]
    if table not in tables:
        with database.connect(url) as connection:  # Embeddings, but not what the predict job made: bad input.
            missing = database.missing_columns(connection, table)
            if missing and database.embedding_type(connection, table) is not None:
                raise RunRefused(database.not_predictions_table(table, missing))
        raise StartupError(f"no table {table} of embeddings in {database.describe(url)} (tables of embeddings "
                           f"there: {', '.join(tables) or 'none'})")
    return table


def _embedder(model_dir: str, pool: Any, table: str, step_specs: Any = ()):
    """The export, loaded once, checked against what the table holds (its size and, when recorded, its SHA-256).

    An export that takes images after the run's steps needs them named (--image_step, SHA-256 checked): RunRefused
    otherwise. Nothing a run folder or the export names is ever loaded on its own."""
    from beam_pipeline.common.files import export_sha256
    from beam_pipeline.common.query_embedding import QueryEmbedder, StepsNeeded

    try:
        embedder = QueryEmbedder(model_dir, step_specs)
    except StepsNeeded as error:
        raise RunRefused(str(error)) from None
    with pool.connection() as connection:
        kind = database.embedding_type(connection, table)
        recorded = database.table_export(connection, table)
    size = int(kind.split("(")[1].rstrip(")"))
    if embedder.size != size:
        raise StartupError(f"--model_dir {model_dir} embeds into {embedder.size} values, but table {table} holds "
                           f"{kind}: use the export its predictions came from")
    if recorded is not None and recorded[0] != export_sha256(model_dir):
        raise StartupError(f"table {table} holds embeddings of the export {recorded[1]}, not of {model_dir}")
    return embedder
