"""A shard's signals as the quality job's workers compute them: batched, the last batch padded, one trace."""

import numpy as np
import tensorflow as tf

from beam_pipeline.common.records import example_bytes
from beam_pipeline.quality import signal_shards, signals
from tf_serving_input.codecs import CODECS, to_bytes
from tf_serving_input.features import PreprocessConfig

SIZE = 32
CONFIG = PreprocessConfig(image_size=SIZE, image_format="raw")


def records_of(images):
    codec = CODECS["raw"]
    return [example_bytes(to_bytes(codec.encode(tf.constant(image), CONFIG)), codec, SIZE, f"img-{i}.png",
                          f"{i:016x}", f"label-{i % 3}")
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


def write_shard(path, records):
    from beam_pipeline.common.records import frame_record

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(frame_record(record) for record in records))


def test_each_row_records_where_its_stored_image_starts_in_the_shard(tmp_path):
    from beam_pipeline.common.records import read_records_at

    images = np.random.default_rng(7).integers(0, 256, (signal_shards.BATCH + 3, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)  # Sources "img-9.png", "img-10.png": the records differ in length.
    path = tmp_path / "data" / "train-00000-of-00001.tfrecord"
    write_shard(path, records)
    columns = measure(records, CONFIG)
    offsets = signal_shards.record_offsets(columns)
    assert offsets == [offset for offset, _ in read_records_at(open(path, "rb"))]
    with open(path, "rb") as f:  # What the report does: seek to a row's record, no scan.
        for index in (len(records) - 1, 0, 5):
            f.seek(offsets[index])
            assert next(read_records_at(f, offset=offsets[index]))[1] == records[index]


def test_the_report_reads_only_the_records_it_shows(tmp_path):
    """A thumbnail is read at its record's offset: a damaged record before it (or the rest of a
    million-image shard) is never read, where a front-to-back scan read up to the whole shard."""
    from beam_pipeline.quality.thumbnails import thumbnails
    from tf_serving_input.layout import OutputLayout

    images = np.random.default_rng(8).integers(0, 256, (6, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)
    columns = measure(records, CONFIG)
    offsets = signal_shards.record_offsets(columns)
    layout = OutputLayout(str(tmp_path))
    path = tmp_path / "data" / "train-00000-of-00001.tfrecord"
    write_shard(path, records)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 40] ^= 0xFF  # Record 1's bytes: its CRC fails if anything reads it.
    path.write_bytes(bytes(data))
    uris = thumbnails(layout, CONFIG, [("train-00000-of-00001", 4, offsets[4]), ("train-00000-of-00001", 0, 0)])
    assert set(uris) == {("train-00000-of-00001", 4), ("train-00000-of-00001", 0)}
    assert all(uri.startswith("data:image/jpeg;base64,") for uri in uris.values())


def test_a_signals_file_of_an_earlier_version_is_measured_again_on_resume(tmp_path):
    """A resumed run keeps each shard an earlier attempt finished, unless that file lacks a column of
    SCHEMA (written before the column existed): the findings would fail on it, so it is measured again."""
    import pyarrow as pa

    from beam_pipeline.common.job_shards import RecordShard
    from beam_pipeline.common.shard_file import ShardFileWriter
    from tf_serving_input.layout import QualityLayout

    images = np.random.default_rng(9).integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)
    path = tmp_path / "job" / "data" / "train-00000-of-00001.tfrecord"
    write_shard(path, records)
    shard = RecordShard(name="train-00000-of-00001", split="train", path=str(path), rows=3)
    out = str(tmp_path / "quality")
    layout = QualityLayout(out)
    compute = signal_shards.ComputeShardSignals(out, CONFIG.to_dict())

    first = list(compute.process(shard))[0]
    assert list(compute.process(shard))[0]["sha256"] == first["sha256"]  # Finished: kept, not redone.

    old = signal_shards.read_table(layout.shard_file(shard.name)).drop_columns(["offset"])
    with ShardFileWriter(layout, shard.name) as writer:  # As the earlier version published its file.
        writer.write(signal_shards.to_parquet_bytes(old), records=3)
        writer.publish({"split": "train", "rows": 3, "failed": []})
    assert "offset" not in signal_shards.read_table(layout.shard_file(shard.name)).column_names
    again = list(compute.process(shard))[0]
    table = signal_shards.read_table(layout.shard_file(shard.name))
    assert table.schema == signal_shards.SCHEMA and again["sha256"] == first["sha256"]
    assert table.column("offset").to_pylist()[0] == 0 and isinstance(table, pa.Table)


def test_a_shard_changed_since_its_signals_fails_the_report_naming_the_file(tmp_path):
    """The signals verified the shard; a shown record that no longer reads at its offset (changed,
    truncated) is one line naming the shard and what to do, not a CRC message without a file."""
    import pytest

    from beam_pipeline.quality.thumbnails import thumbnails
    from tf_serving_input.layout import OutputLayout

    images = np.random.default_rng(10).integers(0, 256, (4, SIZE, SIZE, 3), dtype=np.uint8)
    records = records_of(images)
    offsets = signal_shards.record_offsets(measure(records, CONFIG))
    path = tmp_path / "data" / "train-00000-of-00001.tfrecord"
    layout = OutputLayout(str(tmp_path))
    write_shard(path, records)
    data = path.read_bytes()
    truncated = data[:offsets[3]]
    flipped = data[:offsets[2]] + bytes([data[offsets[2]] ^ 1]) + data[offsets[2] + 1:]  # Record 2's length.
    for changed, index, why in ((truncated, 3, "the file ends before it"), (flipped, 2, "fails its CRC")):
        path.write_bytes(changed)
        with pytest.raises(ValueError, match=rf"train-00000-of-00001\.tfrecord changed .*{why}.*--overwrite"):
            thumbnails(layout, CONFIG, [("train-00000-of-00001", index, offsets[index])])
        assert thumbnails(layout, CONFIG, [("train-00000-of-00001", 1, offsets[1])])  # The others still read.


def test_a_multi_label_run_s_records_are_measured_with_their_labels_joined():
    """label/text holds 0..n values in a multi-label run: every record is measured, its labels joined by '|'."""
    from tf_serving_input.columns import FeatureSpec

    codec, spec = CODECS["raw"], FeatureSpec(multi_label=True)
    images = np.random.default_rng(5).integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    records = [example_bytes(to_bytes(codec.encode(tf.constant(image), CONFIG)), codec, SIZE, f"img-{i}.png",
                             f"{i:016x}", "", labels=labels, spec=spec)
               for i, (image, labels) in enumerate(zip(images, [("cat", "dog"), (), ("bird",)]))]
    assert measure(records, CONFIG)["label"] == ["cat|dog", "", "bird"]
