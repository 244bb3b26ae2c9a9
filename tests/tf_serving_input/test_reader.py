"""The reader's batch-level pieces in process: augmentation fused with normalization, the training path."""

import numpy as np
import pytest
import tensorflow as tf

from tf_serving_input import make_dataset
from tf_serving_input.layout import OutputLayout
from tf_serving_input.normalization import normalize_images
from tf_serving_input.reader import _augment_fused, augment_and_normalize

MEAN, STD = tf.constant([10.0, 20.0, 30.0]), tf.constant([2.0, 3.0, 4.0])
IMAGES = tf.constant(np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3)), tf.uint8)


def randoms(area, top, left, flip):
    return tf.constant([[area, top, left, flip]] * 3, tf.float32)


def test_whole_crop_without_flip_is_exactly_the_normalization():
    expected = normalize_images(IMAGES, MEAN, STD)
    for augment in (augment_and_normalize, _augment_fused):  # Eager and XLA-compiled.
        np.testing.assert_array_equal(augment(IMAGES, MEAN, STD, randoms(1.0, 0, 0, 0.9)), expected)
        np.testing.assert_array_equal(augment(IMAGES, MEAN, STD, randoms(1.0, 0, 0, 0.1)),
                                      normalize_images(tf.reverse(IMAGES, [2]), MEAN, STD))


def test_a_crop_zooms_into_its_corner():
    # The smallest crop (area 0.8: side 8 * 0.894 = 7.2 px) at the top-left corner: the source's
    # last row and column are never sampled, and one row and one column repeat.
    image = np.arange(64, dtype=np.uint8).reshape(1, 8, 8, 1).repeat(3, axis=3) * 3
    out = augment_and_normalize(tf.constant(image), tf.zeros(3), tf.ones(3), tf.constant([[0.0, 0.0, 0.0, 0.9]]))
    rows = out.numpy()[0, :, 0, 0] // 24  # Source row of each output row (value = 3 * (8 row + column)).
    assert rows.tolist() == [0, 1, 2, 3, 4, 4, 5, 6]
    mirrored = augment_and_normalize(tf.constant(image), tf.zeros(3), tf.ones(3), tf.constant([[0.0, 0.0, 0.0, 0.1]]))
    np.testing.assert_array_equal(mirrored.numpy()[0], out.numpy()[0, :, ::-1])


def test_training_batches_are_full_augmented_and_reproducible_with_a_seed(tiny_job):
    out, _, _ = tiny_job
    def batches(batch_size, count=None):
        dataset = make_dataset(out, "train", batch_size=batch_size, training=True, seed=7, deterministic=True,
                               repeat=count is not None)
        return [x.numpy() for x, _ in dataset.take(count or -1)]

    first = batches(4)
    plain = np.concatenate([x.numpy() for x, _ in make_dataset(out, "train", batch_size=4, training=False)])
    assert [b.shape for b in first] == [(4, 16, 16, 3)] * 2  # 9 train rows: the partial batch dropped.
    assert all(np.isfinite(b).all() for b in first)
    assert not any(np.allclose(b, plain[i * 4:i * 4 + 4]) for i, b in enumerate(first))
    # The same seed, the same crops and flips, though the parallel map runs its 64 calls in any order.
    singles = batches(1, 64)
    for _ in range(3):
        assert all(np.array_equal(a, b) for a, b in zip(singles, batches(1, 64)))
    assert make_dataset(out, "train", batch_size=4, training=False).cardinality().numpy() == 3


def test_augmentation_changes_the_images_of_the_same_seed_and_order(tiny_job):
    """Shuffling alone makes batches differ: compare the same seed with augmentation on and off."""
    out, _, _ = tiny_job

    def batches(augment):
        dataset = make_dataset(out, "train", batch_size=4, training=True, seed=7, deterministic=True, augment=augment)
        return [(x.numpy(), y.numpy()) for x, y in dataset]

    augmented, plain = batches(True), batches(False)
    assert [y.tolist() for _, y in augmented] == [y.tolist() for _, y in plain]  # The same images, in order.
    assert all(not np.array_equal(a, p) for (a, _), (p, _) in zip(augmented, plain))
    assert all(np.array_equal(p, q) for (p, _), (q, _) in zip(plain, batches(False)))


def _batches(out, **kwargs):
    return [(x.numpy(), y.numpy()) for x, y in make_dataset(out, "train", batch_size=4, **kwargs)]


def _sorted_images(batches):
    images = np.concatenate([x for x, _ in batches])
    return images[np.lexsort(images.reshape(len(images), -1).T)]


# JPEG storage (decoded one record per map call), raw (a batch per call).
@pytest.mark.parametrize(("run", "storage"), [("tiny_job", "jpeg"), ("tiny_raw_job", "raw")])
def test_a_cached_reader_yields_what_the_uncached_one_yields_every_epoch(request, run, storage):
    fixture = request.getfixturevalue(run)
    out = fixture[0] if run == "tiny_job" else fixture
    assert OutputLayout(out).load_manifest()["config"]["preprocess"]["image_format"] == storage
    plain = _batches(out, training=False)
    cached = make_dataset(out, "train", batch_size=4, training=False, cache=True)
    for _ in range(2):  # The second pass comes from the cache.
        epoch = [(x.numpy(), y.numpy()) for x, y in cached]
        assert len(epoch) == len(plain)
        assert all(np.array_equal(a, b) and np.array_equal(c, d) for (a, c), (b, d) in zip(epoch, plain))
    # Training: reshuffled each epoch, the same images every epoch.
    training = make_dataset(out, "train", batch_size=4, training=True, cache=True, seed=3, augment=False,
                            drop_remainder=False)
    epochs = [[(x.numpy(), y.numpy()) for x, y in training] for _ in range(2)]
    for epoch in epochs:
        np.testing.assert_array_equal(_sorted_images(epoch), _sorted_images(plain))


def test_a_cache_that_would_not_fit_in_memory_is_refused_naming_its_size(tiny_job, monkeypatch):
    from tf_serving_input import reader

    monkeypatch.setattr(reader, "available_memory_bytes", lambda: 2 * 16 * 16 * 3)  # Room for one image.
    with pytest.raises(ValueError, match=r"cache=True would keep \d+ decoded 16x16 images in memory"):
        make_dataset(tiny_job[0], "train", cache=True)
    assert make_dataset(tiny_job[0], "train", cache=False) is not None


def _records(out):
    """{key: parsed tf.train.Example} of every record of a run, read with TensorFlow's own classes."""
    from beam_pipeline.common.records import read_records

    examples = {}
    for shard in OutputLayout(out).load_manifest()["shards"]:
        with open(OutputLayout(out).path(shard["file"]), "rb") as f:
            for record in read_records(f):
                example = tf.train.Example.FromString(record)
                examples[example.features.feature["image/key"].bytes_list.value[0].decode()] = example
    return examples


def test_the_kept_columns_come_back_typed_with_missing_values_marked(tiny_job):
    import math

    from tf_serving_input.column_parsing import load_feature_spec
    from tf_serving_input.column_stats import load_column_stats

    out = tiny_job[0]
    assert [c.name for c in load_feature_spec(out).columns] == ["caption", "tags", "score", "count", "emb",
                                                                "objects", "classes"]
    saved = load_column_stats(out)
    tags = [label for label, _ in saved["tags"]["vocabulary"]]
    names = ["caption", "tags", "score", "count", "emb", "objects", "classes"]
    dataset = make_dataset(out, "train", batch_size=4, training=False, columns=names + ["score"])
    plain = [y.numpy() for _, y in make_dataset(out, "train", batch_size=4, training=False)]
    examples = _records(out)
    seen, scores = 0, []
    for (images, columns), labels in zip(dataset, plain):
        scores.append(columns["score"].numpy())
        assert sorted(columns) == sorted(["label", *names]) and images.shape[1:] == (16, 16, 3)
        np.testing.assert_array_equal(columns["label"].numpy(), labels)  # "label" as without columns.
        assert columns["score"].dtype == tf.float32 and columns["count"].dtype == tf.int64  # An int stays exact.
        assert columns["emb"].shape.rank == 2 and columns["objects"].shape.as_list()[2:] == [4]
        for i, caption in enumerate(columns["caption"].numpy()):
            count = int(columns["count"].numpy()[i])
            example = next(e for e in examples.values() if e.features.feature["column/count"].int64_list.value[0]
                           == count)
            feature = example.features.feature
            assert caption == (feature["column/caption"].bytes_list.value[0] if "column/caption" in feature else b"")
            score = columns["score"].numpy()[i]
            assert ("column/score" in feature) != math.isnan(score)
            assert columns["emb"][i].numpy().tolist() == list(feature["column/emb"].float_list.value)
            assert columns["objects"][i].numpy().tolist() == [
                list(box) for box in zip(*(feature[f"image/object/bbox/{k}"].float_list.value
                                           for k in ("xmin", "ymin", "xmax", "ymax")))]
            assert [c.decode() for c in columns["classes"][i].numpy()] == [
                c.decode() for c in feature["image/object/class/text"].bytes_list.value]
            # Multi-hot in the order of the vocabulary the job's statistics saved (column_stats.json).
            hot = [tags[j] for j in np.flatnonzero(columns["tags"].numpy()[i])]
            assert sorted(hot) == sorted(v.decode() for v in feature["column/tags"].bytes_list.value)
            seen += 1
    assert seen == 9
    # Z-scored per batch; through the cache (sparse values kept decoded) too.
    zscored = make_dataset(out, "train", batch_size=4, training=False, columns=["score"], zscore=["score"],
                           column_statistics={"score": (1.0, 0.5)}, cache=True)
    for _ in range(2):
        got = [columns["score"].numpy() for _, columns in zscored]
        np.testing.assert_allclose(np.concatenate(got), (np.concatenate(scores) - 1.0) / 0.5)
    counted = make_dataset(out, "train", batch_size=16, training=False, columns=["count"], zscore=["count"],
                           column_statistics={"count": (1.0, 2.0)})
    assert {c["count"].dtype for _, c in counted} == {tf.float32}  # Z-scored: float32 (a missing one NaN).
    training = make_dataset(out, "train", batch_size=4, training=True, seed=1, columns=["objects", "count"])
    assert [columns["objects"].shape[0] for _, columns in training] == [4, 4]  # Augmented, the columns beside.
    with pytest.raises(ValueError, match="no kept column 'nosuch'; the run keeps: caption, tags"):
        make_dataset(out, columns=["nosuch"])
    # Without column_statistics: the run's own (column_stats.json, the train split's mean and std).
    own = make_dataset(out, "train", batch_size=4, training=False, columns=["score"], zscore=["score"])
    mean, std = saved["score"]["mean"], saved["score"]["std"]
    np.testing.assert_allclose(np.concatenate([c["score"].numpy() for _, c in own]),
                               (np.concatenate(scores) - mean) / std, rtol=1e-6)


def test_a_multi_label_run_reads_its_labels_multi_hot_in_vocabulary_order(tiny_raw_job):
    import tensorflow_transform as tft

    from tf_serving_input import features

    vocabulary = [v.decode() for v in tft.TFTransformOutput(tiny_raw_job).vocabulary_by_name(
        features.LABEL_VOCABULARY)]
    examples = _records(tiny_raw_job)
    assert all(len(e.features.feature["label/text"].bytes_list.value) in (1, 2) for e in examples.values())
    assert any(len(e.features.feature["label/text"].bytes_list.value) == 2 for e in examples.values())
    plain = list(make_dataset(tiny_raw_job, "validation", batch_size=8, training=False))
    with_columns = list(make_dataset(tiny_raw_job, "validation", batch_size=8, training=False, columns=[]))
    for (_, labels), (_, columns) in zip(plain, with_columns):
        assert labels.dtype == tf.float32 and labels.shape[1] == len(vocabulary)
        np.testing.assert_array_equal(labels.numpy(), columns["label"].numpy())
        assert set(np.unique(labels.numpy())) <= {0.0, 1.0}
