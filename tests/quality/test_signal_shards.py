"""A shard's signals as the quality job's workers compute them: batched, the last batch padded, one trace."""

import numpy as np
import tensorflow as tf

from beam_pipeline.common.records import make_example
from beam_pipeline.quality import signal_shards, signals
from tf_serving_input.codecs import CODECS, to_bytes
from tf_serving_input.features import PreprocessConfig

SIZE = 32
CONFIG = PreprocessConfig(image_size=SIZE, image_format="raw")


def records_of(images):
    codec = CODECS["raw"]
    return [make_example(to_bytes(codec.encode(tf.constant(image), CONFIG)), codec, SIZE, f"img-{i}.png",
                         f"{i:016x}", f"label-{i % 3}").SerializeToString(deterministic=True)
            for i, image in enumerate(images)]


def measure(records, preprocess):
    """The columns of `records`, a batch at a time, as a worker measures a shard."""
    columns = signal_shards.empty_columns()
    for start in range(0, len(records), signal_shards.BATCH):
        signal_shards.measure_into(columns, records[start:start + signal_shards.BATCH], preprocess)
    return columns


def test_a_shard_with_a_partial_last_batch_gets_each_records_own_signals_once():
    count = signal_shards.BATCH + 5  # One full batch, then five records: padded to BATCH, the pads dropped.
    images = np.random.default_rng(4).integers(0, 256, (count, SIZE, SIZE, 3), dtype=np.uint8)
    columns = measure(records_of(images), CONFIG)
    expected = {name: value.numpy() for name, value in signals.image_signals_graph(tf.constant(images)).items()}
    assert columns["key"] == [f"{i:016x}" for i in range(count)]
    assert columns["source"][-1] == f"img-{count - 1}.png" and columns["label"][:3] == ["label-0", "label-1",
                                                                                         "label-2"]
    for name in signal_shards.NUMBERS:
        assert len(columns[name]) == count, name
        np.testing.assert_allclose(columns[name], expected[name], rtol=1e-5, err_msg=name)
    assert len(set(columns["digest_hi"])) == count  # The five last rows are theirs, not the pad's copies.


def test_every_call_gets_one_batch_shape_so_xla_compiles_once_per_worker(monkeypatch):
    """XLA compiles per input shape: each shard's own remainder size (1..BATCH-1) would compile anew."""
    images = np.random.default_rng(5).integers(0, 256, (signal_shards.BATCH, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)
    shapes, traced = [], signal_shards._parse_and_measure
    monkeypatch.setattr(signal_shards, "_parse_and_measure",
                        lambda batch, preprocess: shapes.append(tuple(batch.shape)) or traced(batch, preprocess))
    for size in (1, 7, signal_shards.BATCH - 1, signal_shards.BATCH + 1):
        assert len(measure((records * 2)[:size], CONFIG)["key"]) == size
    assert set(shapes) == {(signal_shards.BATCH,)}


def test_a_worker_traces_once_for_every_shard_of_one_job():
    """Each shard gets its own PreprocessConfig object (from the job's manifest dict): equal configs, one trace.

    A retrace per shard cost ~0.24 s a shard (a quarter of a 1,000-image shard's time).
    """
    images = np.random.default_rng(6).integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)
    measure(records, PreprocessConfig.from_dict(CONFIG.to_dict()))  # Traced (or already, by an earlier test).
    traced = signal_shards._traced_measure(CONFIG).experimental_get_tracing_count()
    for _ in range(3):  # Three more shards, as ComputeShardSignals.process makes each one's config.
        measure(records, PreprocessConfig.from_dict(CONFIG.to_dict()))
    assert signal_shards._traced_measure(CONFIG).experimental_get_tracing_count() == traced == 1
