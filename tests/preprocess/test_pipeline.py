"""The assembled pipeline in TestPipeline: shards, accounting and TFT statistics against NumPy."""

import urllib.parse

import apache_beam as beam
import numpy as np
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import imaging
from beam_pipeline.inputs import rows as source
from beam_pipeline.preprocess.options import JobConfig
from beam_pipeline.preprocess.pipeline import build_pipeline
from tf_serving_input import normalization
from tf_serving_input import preprocessing as pp
from tf_serving_input.features import PreprocessConfig

SIZE = 8


def test_statistics_and_vocabulary_match_numpy(tmp_path):
    rng = np.random.default_rng(7)
    rows = [["path", "label", "split"]]
    train_pixels = []
    config = PreprocessConfig(image_size=SIZE, image_format="png", resize_mode="stretch")
    # Labels with stray spaces are the label they spell; a blank one is unlabeled (issue 55).
    labels = [" b", "a ", "b", "   ", "c", "b\t", "a", ""]
    for i, label in enumerate(labels):
        image = rng.integers(0, 256, size=(12, 10, 3), dtype=np.uint8)
        data = imaging.encode(image, "PNG")
        (tmp_path / f"{i} é.png").write_bytes(data)
        # Two rows name their file by a file: URL (RFC 8089, percent-encoded), as a file.
        path = {2: "file://", 5: "FILE://localhost"}.get(i, "") + urllib.parse.quote(str(tmp_path / f"{i} é.png"))
        rows.append([path if i in (2, 5) else f"{i} é.png", label, "train"])
        train_pixels.append(pp.preprocess_image(data, config).numpy())
    for i in range(3):  # Validation rows: a far-off colour and label that must not count.
        (tmp_path / f"v{i}.png").write_bytes(imaging.encode(imaging.solid((255, 255, 255)), "PNG"))
        rows.append([f"v{i}.png", "z", "validation"])
    rows.append(["missing.png", "a", "train"])
    imaging.write_csv(tmp_path / "in.csv", rows[0], rows[1:])

    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "shards").mkdir()
    job = JobConfig(input_csv=str(tmp_path / "in.csv"), output_dir=str(out), preprocess=config,
                    columns=source.CsvColumns())
    shard_counts = {"train": 3, "validation": 2}
    with TestPipeline(runner=FnApiRunner()) as p:
        statuses = build_pipeline(p, job, shard_counts, str(tmp_path / "tmp"))
        totals = (statuses
                  | beam.Map(lambda s: (s["split"], (s["rows"], s["records"], len(s["failed"]))))
                  | beam.CombinePerKey(lambda values: tuple(map(sum, zip(*values)))))
        assert_that(totals, equal_to([("train", (9, 8, 1)), ("validation", (3, 3, 0))]))
        names = statuses | beam.Map(lambda s: s["name"])
        assert_that(names, equal_to(["train-00000-of-00003", "train-00001-of-00003", "train-00002-of-00003",
                                     "validation-00000-of-00002", "validation-00001-of-00002"]),
                    label="EveryShardWritten")

    mean, std, vocabulary = normalization.read_statistics(str(out))
    expected = np.stack(train_pixels).reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(mean, expected.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(std, expected.std(axis=0), rtol=1e-4)  # Population std, as tft.var.
    assert vocabulary == ["b", "a", "c"]  # By frequency; '' and validation-only 'z' excluded.


def test_arrow_batches_match_tfx_bsl_layout():
    """The shard writer builds TFT's Arrow input by hand; it must equal tfx_bsl's own conversion."""
    import tensorflow as tf
    from tfx_bsl.tfxio import tensor_to_arrow

    from beam_pipeline.preprocess.analysis import tensor_adapter_config, to_record_batch

    moments = [np.arange(7, dtype=np.int64) * i for i in range(3)]
    labels = [b"a", b"", b"c"]
    converter = tensor_to_arrow.TensorsToRecordBatchConverter(normalization.raw_batch_type_specs())
    expected = converter.convert({"pixel_moments": tf.constant(np.stack(moments)), "label": tf.constant(labels)})
    assert to_record_batch(moments, labels).equals(expected)
    assert tensor_adapter_config().arrow_schema.equals(expected.schema)


def test_pixel_moments_are_exact():
    image = np.random.default_rng(1).integers(0, 256, size=(9, 7, 3), dtype=np.uint8)
    moments = normalization.pixel_moments(image).numpy()
    pixels = image.reshape(-1, 3).astype(np.int64)
    assert moments.tolist() == pixels.sum(0).tolist() + (pixels ** 2).sum(0).tolist() + [63]
