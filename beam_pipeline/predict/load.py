"""The database load: every Parquet shard of a finished predict run verified, then upserted into its table.

    LoadTask per shard -> Reshuffle (spread over the workers) -> LoadShard (verify, upsert, result file)

A shard that fails its checksum is not loaded, a row the database cannot store
is left out (`unstorable_text`), a database error is the shard's problem: each
lands in the shard's result file, which the launcher reads. The pipeline waits
on the database, so the launcher runs it on worker threads
(`runners.for_io_bound_work`).
"""

import dataclasses
import hashlib

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.shard_file import read_status, write_json
from beam_pipeline.inputs.rows import failure_record
from beam_pipeline.predict.inference import RowRef
from tf_serving_input import failures
from tf_serving_input.layout import PredictionLayout, shard_stem


@dataclasses.dataclass(frozen=True)
class LoadTask:
    """One Parquet shard to load: its stem, path and the size and SHA-256 its status recorded."""

    name: str
    path: str
    bytes: int
    sha256: str


def load_tasks(layout, manifest):
    """The LoadTasks of a finished predict run, from its manifest."""
    return [LoadTask(name=shard_stem(shard["file"]), path=layout.path(shard["file"]),
                     bytes=shard["bytes"], sha256=shard["sha256"]) for shard in manifest["shards"]]


class LoadShard(beam.DoFn):
    """A LoadTask -> its verified rows upserted into the table, and a result file saying what happened.

    Never raises for a shard: a file that fails its checksum is not loaded, a row the database
    cannot store is left out, a database error is recorded; each is reported in the shard's result
    (`layout.load_result_file`), which the launcher reads. One connection per worker process.
    """

    def __init__(self, output_dir, url, table, dataset_id):
        self._layout = PredictionLayout(output_dir)
        self._url = url
        self._table = table
        self._dataset_id = dataset_id
        self._connection = None
        self._connect_error = None

    def setup(self):
        from beam_pipeline import database

        try:
            self._connection = database.connect(self._url)
        except database.DatabaseError as error:
            self._connect_error = str(error)

    def process(self, task):
        result = {"name": task.name, "loaded": 0, "failed": [], "problem": None}
        try:
            result.update(self._load(task))
        except Exception as error:  # noqa: BLE001 - reported as the shard's problem, in one line.
            from beam_pipeline.common.redact import redact

            result["problem"] = redact(f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
                                       if str(error).strip() else type(error).__name__)
        write_json(self._layout.load_result_file(self._table, task.name), result)
        yield result

    def _load(self, task):
        from beam_pipeline import database
        from beam_pipeline.predict import shards as prediction_shards

        if self._connect_error:
            return {"problem": self._connect_error}
        status = read_status(self._layout.status_file(task.name))
        if status is None or status.get("sha256") != task.sha256:
            return {"problem": f"its status file {self._layout.status_file(task.name)} is missing, fails its "
                               "checksum or disagrees with the manifest"}
        with FileSystems.open(task.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            data = f.read()
        if len(data) < task.bytes:
            return {"problem": f"{task.path} is truncated: {len(data)} of {task.bytes} bytes"}
        if len(data) != task.bytes or hashlib.sha256(data).hexdigest() != task.sha256:
            return {"problem": f"{task.path} does not match the SHA-256 its status file records (a changed byte)"}
        table = prediction_shards.read_table(data)
        loaded, left_out = database.upsert_table(self._connection, self._table, self._dataset_id, table)
        keys, sources, splits = (table.column(name).to_pylist() for name in ("key", "source", "split"))
        failed = [failure_record(RowRef(shard=task.name, index=index, total=len(table), key=keys[index],
                                        source=sources[index], split=splits[index]),
                                 failures.RowFailure(failures.UNSTORABLE_TEXT, detail))
                  for index, detail in sorted(left_out.items())]
        return {"loaded": loaded, "failed": failed}

    def teardown(self):
        if self._connection is not None:
            self._connection.close()


def build_load_pipeline(pipeline, output_dir, tasks, url, table, dataset_id):
    """Adds the database load: every Parquet shard verified and upserted into `table`, spread over the workers."""
    return (pipeline
            | "ShardTasks" >> beam.Create(tasks)
            | "SpreadShards" >> beam.Reshuffle()
            # LoadTask
            | "Upsert" >> beam.ParDo(LoadShard(output_dir, url, table, dataset_id)))
            # load result dict (also written to the shard's result file)
