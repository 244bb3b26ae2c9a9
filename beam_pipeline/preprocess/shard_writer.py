"""The per-shard DoFn: one shard's rows -> its file, its status, and what the statistics need.

One call handles one shard, so pixels never leave the worker that decoded
them. The work is done by `RowPreprocessor` (rows -> records, no Beam) and
`ShardFileWriter` (file, checksum, publishing, status); this DoFn wires them
and emits, through a tagged output, 7 integers per shard and a label per image
(with kept columns, their values too) for tensorflow-transform's analysis. A bad row never raises: it is recorded,
with its reason, in the shard's status file.

What this run fetched (URL rows requested, bytes) is counted in Beam metrics,
not only in the status files: a resumed shard fetches nothing, and a
--retry_failed run fetches only the rows it requests again, even when none of
them recovers and the shard's status stays as it was (`fetched_in_run`).
"""

import os
import time

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from beam_pipeline.common.fast_exit import skip_final_collection
from beam_pipeline.common.records import frame_record, iter_records, parse_example
from beam_pipeline.common.runners import configure_tensorflow_threads
from beam_pipeline.common.shard_file import ShardFileWriter, read_verified
from beam_pipeline.inputs import rows as csv_source
from beam_pipeline.inputs.row_reader import RowReader
from beam_pipeline.inputs.rows import failure_record
from beam_pipeline.inputs.urls import FetchConfig, is_http_url
from beam_pipeline.preprocess import step_timing
from beam_pipeline.preprocess.analysis import DESIRED_BATCH_SIZE, to_record_batch
from beam_pipeline.preprocess.row_order import InRowOrder
from beam_pipeline.preprocess.row_preprocessor import BYTES_PER_CALL, ROWS_PER_CALL, RowPreprocessor, Written
from tf_serving_input import column_stats, failures, features
from tf_serving_input.columns import FeatureSpec
from tf_serving_input.features import PIXEL_MOMENTS as MOMENTS
from tf_serving_input.layout import OutputLayout, shard_name

STATS_TAG = "stats"
# Beam counters of what this run did: shards processed (0 from a runner that reports no metrics), URL rows
# requested and their bytes fetched.
METRICS_NAMESPACE = "beam_image_pipeline.preprocess"
_SHARDS, _URL_ROWS, _URL_BYTES = "shards", "url_rows_requested", "url_bytes_fetched"


def fetched_in_run(result, shards):
    """{'requested': URL rows, 'bytes': fetched} by the run whose PipelineResult is `result`, from its counters;
    None when the runner reported no counters for its `shards` shards (the caller falls back to the statuses)."""
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    except Exception:  # noqa: BLE001 - a runner without metrics: the summary falls back, the run still stands.
        return None
    totals = {}
    for counter in counters:
        # Committed (each bundle once, whatever the retries) where the runner has it, else attempted.
        value = counter.committed if counter.committed is not None else counter.attempted
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + (value or 0)
    if totals.get(_SHARDS, 0) < shards:
        return None
    return {"requested": totals.get(_URL_ROWS, 0), "bytes": totals.get(_URL_BYTES, 0)}


def _features(record):
    return parse_example(record).features.feature


def _key(record):
    return _features(record)[features.IMAGE_KEY].bytes_list.value[0].decode("utf-8")


def _analysed(row, spec):
    """(label, kept values) of a written row as the analysis gets them (`column_stats.analysed`)."""
    if spec == FeatureSpec():
        return row.label.encode("utf-8"), None
    labels = row.labels if spec.multi_label else ((row.label,) if row.label else ())
    label = tuple(label.encode("utf-8") for label in labels) if spec.multi_label else row.label.encode("utf-8")
    return label, column_stats.analysed(spec, labels, dict(row.columns))


def statistics_batches(total_moments, rows, spec=FeatureSpec()):
    """A shard's RecordBatches for TFT: one row with its moment totals (no label, no image), then one per written
    row: its label (every label of a multi-label row) and, with kept columns (`spec`), their values."""
    empty = () if spec.multi_label else b""
    entries = [(np.asarray(total_moments, np.int64), empty, None)]
    entries += [(np.zeros(MOMENTS, np.int64), *_analysed(row, spec)) for row in rows]
    for start in range(0, len(entries), DESIRED_BATCH_SIZE):
        batch = entries[start:start + DESIRED_BATCH_SIZE]
        yield to_record_batch([moments for moments, _, _ in batch], [label for _, label, _ in batch], spec,
                              [values for _, _, values in batch] if spec != FeatureSpec() else None)


def _with_fields(outcome, fields):
    """A URL row's failure after its download (not_an_image, truncated, ...) with the fetch's url, http_status
    and attempts, as every failed URL row has them in errors.jsonl."""
    if not fields or not isinstance(outcome, failures.RowFailure) or outcome.fields:
        return outcome
    return failures.RowFailure(outcome.reason, outcome.detail, fields)


class WriteShardFn(beam.DoFn):
    """((split, shard_index), [Row]) -> a shard file, its status file and one summary dict.

    Main output: the shard's status (as written to its status file), with `resumed`.
    Tagged output STATS_TAG, for 'train' shards: Arrow RecordBatches for
    tensorflow-transform (`statistics_batches`). The moment totals are exact
    integers kept in the status file, so a shard an earlier run finished
    re-emits exactly what a fresh one does without decoding anything.
    """

    def __init__(self, output_dir, preprocess_config, shard_counts, max_file_bytes=csv_source.DEFAULT_MAX_FILE_BYTES,
                 stats_split=csv_source.DEFAULT_SPLIT, fetch_config=None, retry_failed=False, steps=(),
                 step_timeout=None, features=FeatureSpec()):
        self._layout = OutputLayout(output_dir)
        self._steps = tuple(steps)  # StepRecords: each worker loads them (SHA-256 checked) in setup.
        self._step_timeout = step_timeout
        # The kept columns (tf_serving_input.columns.FeatureSpec): what each record holds, and what goes to the
        # statistics.
        self._features = features
        self._config = preprocess_config
        self._shard_counts = dict(shard_counts)
        self._max_file_bytes = max_file_bytes
        self._stats_split = stats_split
        self._fetch_config = fetch_config or FetchConfig()
        self._retry_failed = retry_failed
        self._preprocessor = None
        self._row_reader = None  # Started for the first shard holding URL rows, not in __init__ (it pickles).
        self._shards = Metrics.counter(METRICS_NAMESPACE, _SHARDS)
        self._url_rows = Metrics.counter(METRICS_NAMESPACE, _URL_ROWS)
        self._url_bytes = Metrics.counter(METRICS_NAMESPACE, _URL_BYTES)

    def setup(self):
        configure_tensorflow_threads()
        skip_final_collection()
        self._preprocessor = RowPreprocessor(self._config, self._max_file_bytes, steps=self._steps,
                                             step_timeout=self._step_timeout, features=self._features)

    def teardown(self):
        if self._preprocessor is not None:
            self._preprocessor.close()  # A Python step's child process.
        if self._row_reader is not None:
            self._row_reader.close()
            self._row_reader = None

    def _outcomes(self, rows, fetched):
        """(row, Written | RowFailure) in row order: files read here as before; URL rows fetched concurrently,
        preprocessed as they arrive and put back in row order. `fetched` gets the URL rows and bytes, and so
        do this run's counters."""
        urls = sum(is_http_url(row.path) for row in rows)
        if not urls:
            yield from self._preprocessor(rows)
            return
        fetched.update(urls=urls, bytes=0)
        self._url_rows.inc(urls)
        if self._row_reader is None:
            self._row_reader = RowReader(self._fetch_config, self._max_file_bytes)
        in_order = InRowOrder()
        try:
            for batch in self._row_reader.batches(rows, ROWS_PER_CALL, BYTES_PER_CALL):
                size = sum(len(item) for _, row, item, _ in batch if isinstance(item, bytes) and is_http_url(row.path))
                fetched["bytes"] += size
                self._url_bytes.inc(size)
                fields = {position: row_fields for position, _, _, row_fields in batch}
                outcomes = self._preprocessor.preprocess_batch([(position, row, item)
                                                                for position, row, item, _ in batch])
                for position, row, outcome in outcomes:
                    in_order.put(position, row, _with_fields(outcome, fields[position]))
                yield from in_order.ready()
        finally:
            in_order.close()

    def process(self, element):
        (split, shard_index), rows = element
        name = shard_name(split, shard_index, self._shard_counts[split])
        rows = sorted(rows, key=lambda row: row.index)  # Same file bytes whatever the shuffle did.
        finished = read_verified(self._layout, name, len(rows))
        if finished is not None and self._retry_failed:
            finished = self._retry(name, rows, *finished)
        if finished is not None:  # An earlier run wrote it: keep the file, re-emit from its status.
            status, data = finished
            # The rows its records hold (the same CSV: the run's fingerprint), for their labels and kept values.
            row_of = {row.key: row for row in rows}
            written = [row_of[_key(record)] for record in iter_records(data)]
            status = dict(status, resumed=True)
        else:
            status, written = self._write(split, shard_index, name, rows)
        if split == self._stats_split:
            for batch in statistics_batches(status["pixel_moments"], written, self._features):
                yield beam.pvalue.TaggedOutput(STATS_TAG, batch)
        self._shards.inc()
        yield status

    def _retry(self, name, rows, status, data):
        """(status, data) of a finished shard after fetching again its rows that failed transiently.

        The shard becomes what a fresh run would have written had those rows succeeded at once: the
        kept records byte for byte, the recovered ones in row order, each key once, the moments
        summed. Nothing recovered: the shard and its status stay as they are.
        """
        retried = {entry["key"] for entry in status["failed"] if entry["reason"] in failures.TRANSIENT}
        again = [row for row in rows if row.key in retried]
        if not again:
            return status, data
        started = time.time()
        refetched = {}
        outcomes = dict((row.key, outcome) for row, outcome in self._outcomes(again, refetched))
        recovered = {key: outcome for key, outcome in outcomes.items() if isinstance(outcome, Written)}
        if not recovered:
            return status, data
        index_of = {row.key: row.index for row in rows}
        records = [(index_of[_key(record)], record) for record in iter_records(data)]
        records += [(index_of[key], outcome.record) for key, outcome in recovered.items()]
        failed = [entry for entry in status["failed"] if entry["key"] not in retried]
        failed += [failure_record(row, outcomes[row.key]) for row in again if row.key not in recovered]
        failed.sort(key=lambda entry: index_of[entry["key"]])
        moments = np.asarray(status["pixel_moments"], np.int64)
        for outcome in recovered.values():
            moments += outcome.moments
        ordered = [record for _, record in sorted(records, key=lambda pair: pair[0])]
        with ShardFileWriter(self._layout, name) as shard:
            for record in ordered:  # One record at a time: the status keeps its framing digest.
                shard.write_record(record)
            status = shard.publish(dict(
                {key: status[key] for key in ("split", "index", "num_shards", "rows")},
                failed=failed, pixel_moments=moments.tolist(), started=round(started, 3),
                seconds=round(time.time() - started, 3), worker_pid=os.getpid(),
                retried={"rows": len(again), "recovered": len(recovered)},
                # The shard's URL rows, and the bytes of every run that fetched them (this one's counters hold
                # what this run fetched).
                **({"fetch": dict(status["fetch"], bytes=status["fetch"]["bytes"] + refetched.get("bytes", 0))}
                   if "fetch" in status else {})))
        return status, b"".join(frame_record(record) for record in ordered)

    def _write(self, split, shard_index, name, rows):
        started = time.time()
        self._preprocessor.take_step_times()  # This shard's times only.
        failed, written, fetched = [], [], {}
        moments = np.zeros(MOMENTS, np.int64)
        with ShardFileWriter(self._layout, name) as shard:
            for row, outcome in self._outcomes(rows, fetched):
                if isinstance(outcome, Written):
                    shard.write_record(outcome.record)
                    moments += outcome.moments
                    written.append(row)
                else:  # Any per-row failure is recorded, never raised.
                    failed.append(failure_record(row, outcome))
            step_times = self._preprocessor.take_step_times()
            status = shard.publish({
                "split": split, "index": shard_index, "num_shards": self._shard_counts[split],
                "rows": len(rows), "failed": failed, "pixel_moments": moments.tolist(),
                "started": round(started, 3), "seconds": round(time.time() - started, 3),
                "worker_pid": os.getpid(), **({"fetch": fetched} if fetched else {}),
                **({step_timing.STATUS_KEY: step_times} if step_times else {})})
        return dict(status, resumed=False), written
