"""The training reader: a tf.data pipeline over the Beam job's shards, normalized per batch.

    ds = make_dataset(output_dir, split="train", batch_size=64, training=True)  # (images, labels)

Files are interleaved in parallel, records are shuffled while still
serialized, then decoded by the storage codec (codecs.py): 'raw' storage is
parsed and decoded a whole batch per op (no image decoding at all), JPEG/PNG
one image per parallel map call. With `cache=True` the decoded images are kept
in memory after the first epoch and shuffled from there.
Each *batch* is normalized in one XLA-fused op with the statistics held by the
tensorflow-transform graph the job saved (read from it once, never typed
twice), then prefetched. Labels are mapped with the job's TFT vocabulary.

    ds = make_dataset(output_dir, columns=["tags", "score"])   # (images, {"label", "tags", "score"})

With `columns`, the run's kept columns (features.json, `column_parsing`) come as a dict
beside the images (docs/columns.md, "Reading them back").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft

from tf_serving_input import column_parsing, features
from tf_serving_input.codecs import codec_for, parse_record, parse_records
from tf_serving_input.column_stats import load_column_stats
from tf_serving_input.columns import BOXES, FLOAT, FLOATS, INT, LABELS, TEXT, Column, FeatureSpec
from tf_serving_input.features import PreprocessConfig
from tf_serving_input.layout import OutputLayout
from tf_serving_input.machine import available_memory_bytes
from tf_serving_input.normalization import normalize_images, read_statistics

AUTOTUNE = tf.data.AUTOTUNE
# Read buffer per open shard: raw records are ~150 KB, and TFRecordDataset's 256 KiB default
# buffer cut record reading from ~20,000 to ~12,000 records/s on 2 cores.
READ_BUFFER_BYTES = 4 << 20

# The same formula serving runs, compiled by XLA into one pass over the batch: the cast, the
# subtraction and the multiplication otherwise each stream the whole float batch through memory
# (measured 39 vs 155 us per 224x224 image; outputs are bit-identical, see tests).
_normalize_fused = tf.function(normalize_images, jit_compile=True)

_LABEL_SPEC = {features.LABEL_TEXT: tf.io.FixedLenFeature([], tf.string, default_value="")}


def _usable_cores() -> int:
    """Cores this process may run on (affinity and cgroup-set CPU lists count; not on macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# Records decoded at once while filling the cache (raw storage): large enough for the vectorized
# parse to pay, small enough not to hold up the first training batch.
_CACHE_DECODE_BATCH = 256


def _check_cache_fits(images: int, image_size: int) -> None:
    """Raises ValueError when `images` decoded images would take over half of the available memory."""
    needed = images * image_size * image_size * 3
    available = available_memory_bytes()
    if available is not None and needed > available // 2:
        raise ValueError(f"cache=True would keep {images:,} decoded {image_size}x{image_size} images in memory "
                         f"({needed / 2**30:.1f} GiB), over half of the {available / 2**30:.1f} GiB available: "
                         "read without cache, or use a smaller --image_size")


def shard_files(output_dir: str, split: str) -> list[str]:
    """The split's shard files, sorted; raises ValueError naming the folder when there are none."""
    pattern = OutputLayout(output_dir).shard_files_glob(split)
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise ValueError(f"no shards match {pattern}: is {output_dir} the --output_dir of a finished "
                         f"run, and does it have a '{split}' split?")
    return files


def _nearest(coordinates: tf.Tensor, limit: tf.Tensor | int) -> tf.Tensor:
    """Indices of the source pixels nearest to sample coordinates, clamped to [0, limit)."""
    return tf.clip_by_value(tf.cast(tf.round(coordinates), tf.int32), 0, limit - 1)


def augment_and_normalize(images: tf.Tensor, mean: tf.Tensor, std: tf.Tensor, randoms: tf.Tensor,
                          min_crop_area: float = 0.8) -> tf.Tensor:
    """uint8 [B, S, S, 3] -> normalized float32, each image flipped at random and randomly cropped.

    Per image: a square crop of a random area fraction in [min_crop_area, 1] at a random place,
    resampled back to S x S (half-pixel centres, nearest source pixel), and mirrored left-right
    with probability 1/2. `randoms` is float32 [B, 4] uniform in [0, 1): area, top, left, flip.
    With a crop of the whole image and no flip it is exactly `normalize_images`.

    Written for XLA, which compiles it with the normalization into one pass over the batch, and
    for memory traffic, which is what costs on a CPU. Each pixel's 3 bytes are packed into one
    uint32, so that gathering the crop's columns (the flip folded into their indices) moves words,
    not bytes; then rows are gathered whole. Nearest-neighbour sampling: the zoom is at most
    1/sqrt(min_crop_area) (1.12x), so at most one row or column in nine repeats. Measured on 64
    224 px images in the training reader: 0.73-0.91x the throughput of no augmentation, where per-image
    `crop_and_resize` on the normalized floats gave 0.15x and a bilinear version of this 0.5x
    (docs/benchmarks.md).
    """
    shape = tf.shape(images)
    size = tf.cast(shape[1], tf.float32)
    side = tf.sqrt(min_crop_area + (1.0 - min_crop_area) * randoms[:, 0]) * size  # [B]
    top = randoms[:, 1] * (size - side)
    left = randoms[:, 2] * (size - side)
    centres = tf.range(size) + 0.5  # Output pixel centres.
    scale = (side / size)[:, None]
    rows = _nearest(top[:, None] + centres[None, :] * scale - 0.5, shape[1])  # [B, S] source rows.
    columns = _nearest(left[:, None] + centres[None, :] * scale - 0.5, shape[2])
    columns = tf.where((randoms[:, 3] < 0.5)[:, None], tf.reverse(columns, [1]), columns)
    pixels = tf.bitcast(tf.pad(images, [[0, 0], [0, 0], [0, 0], [0, 1]]), tf.uint32)  # [B, H, W]
    pixels = tf.bitcast(tf.gather(pixels, columns, axis=2, batch_dims=1), tf.uint8)[..., :3]
    return normalize_images(tf.gather(pixels, rows, axis=1, batch_dims=1), mean, std)


_augment_fused = tf.function(augment_and_normalize, jit_compile=True)


def make_dataset(output_dir: str, split: str = "train", batch_size: int = 64, training: bool = True, *,
                 repeat: bool = False, cache: bool = False, seed: int | None = None,
                 drop_remainder: bool | None = None, augment: bool | None = None, deterministic: bool | None = None,
                 shuffle_buffer: int = 2048, cycle_length: int | None = None,
                 input_context: tf.distribute.InputContext | None = None,
                 transform_output: tft.TFTransformOutput | None = None, columns: Sequence[str] | None = None,
                 zscore: Sequence[str] = (), column_statistics: Mapping[str, tuple[float, float]] | None = None,
                 ) -> tf.data.Dataset:
    """Returns a tf.data.Dataset of (images float32 [B, S, S, 3], labels int64 [B]), or with `columns`
    of (images, {"label": ..., NAME: ...}).

    Args:
      output_dir: the Beam job's --output_dir.
      split: which split's shards to read.
      batch_size: images per batch (per replica when `input_context` is given).
      training: shuffle files and records, augment, drop the last partial batch.
      repeat: repeat forever (after caching, before batching).
      cache: keep the decoded images (uint8) and their labels in memory after the first pass,
        so that later epochs neither read, parse nor decode (S * S * 3 bytes per image: ~150 KB
        at 224 px, 2.4 KB at 28 px). Worth it for JPEG/PNG storage beside a CPU-bound training
        step; raw storage reads about as fast without it. Refused with a ValueError when the
        split would take over half of the available memory. Files are then read in the first
        epoch's order; records are still shuffled every epoch when training.
      seed: seed for shuffling and augmentation (the same crops and flips when set; the same order
        only with `deterministic=True` too, since parallel maps otherwise yield as they finish).
      drop_remainder: drop the last partial batch; defaults to `training`.
      augment: a random flip and random resized crop per image (`augment_and_normalize`, fused
        with the normalization into one XLA pass); defaults to `training`.
      deterministic: element order of the parallel interleave and maps; defaults
        to `not training` (evaluation order is reproducible).
      shuffle_buffer: records in the shuffle buffer when training (serialized:
        2048 raw 224 px records hold ~300 MB).
      cycle_length: files read at once (default: the usable cores, from 4 to 16), each
        through a 4 MiB read buffer.
      input_context: a `tf.distribute.InputContext`; each input pipeline then
        reads its own subset of the files (`distribute_datasets_from_function`).
      transform_output: a loaded `tft.TFTransformOutput` (loaded from output_dir if None).
      columns: kept columns to read (names from the run's features.json); given (even empty), each element
        is (images, dict): "label" (int64 ids [B] as without `columns`; in a multi-label run multi-hot
        float32 [B, V] over the label vocabulary) and each named column: `int` int64 [B], exact
        (`column_parsing.MISSING_INT`, -2**63, where missing), `float` float32 [B] (NaN where missing),
        `text` string [B] ('' where missing), `labels` multi-hot float32 [B, V] over its vocabulary in the
        run's statistics (the boxes' classes: their texts, ragged [B, None]), `floats` float32 ragged
        [B, None], `boxes` float32 ragged [B, None, 4] (xmin, ymin, xmax, ymax).
      zscore: numeric columns of `columns` to standardize per batch, (x - mean) / std as float32 (an int
        column's too; a missing value NaN) (`column_parsing.zscore`), with the mean and std of
        `column_statistics` or, for a column it lacks, of the run's saved statistics (column_stats.json:
        `column_stats.load_column_stats`).
      column_statistics: {NAME: (mean, std)} for `zscore`, e.g. your own training set's.

    Labels are ids in the job's label vocabulary; unlabeled or unknown labels
    are `features.UNKNOWN_LABEL_ID` (-1). A multi-label run's (`--column LABEL:labels`) are multi-hot
    float32 [B, V] over that vocabulary, in its order (unknown labels left out), with or without `columns`.
    """
    if zscore and columns is None:
        raise ValueError("zscore names columns to standardize: name them in columns too")
    manifest = OutputLayout(output_dir).load_manifest()
    config = PreprocessConfig.from_dict(manifest["config"]["preprocess"])
    transform_output = transform_output or tft.TFTransformOutput(output_dir)
    spec = column_parsing.load_feature_spec(output_dir, manifest)
    # A multi-label run's labels are multi-hot, with or without `columns`; a single-label run without `columns`
    # is read as it always was.
    kept = None if columns is None and not spec.multi_label else _ColumnReader(
        spec, transform_output, columns, zscore, column_statistics or {}, output_dir)
    mean, std, _ = read_statistics(output_dir, transform_output)
    mean, std = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
    vocabulary_file = transform_output.vocabulary_file_by_name(features.LABEL_VOCABULARY)
    labels_table = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(vocabulary_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                      tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER),
        default_value=features.UNKNOWN_LABEL_ID)
    drop_remainder = training if drop_remainder is None else drop_remainder
    augment = training if augment is None else augment
    deterministic = (not training) if deterministic is None else deterministic
    options = tf.data.Options()
    options.deterministic = deterministic

    file_names = shard_files(output_dir, split)
    files = tf.data.Dataset.from_tensor_slices(file_names)
    if input_context is not None:
        files = files.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if training:
        files = files.shuffle(len(file_names), seed=seed, reshuffle_each_iteration=True)
    records = files.interleave(lambda name: tf.data.TFRecordDataset(name, buffer_size=READ_BUFFER_BYTES),
                               cycle_length=cycle_length or min(16, max(4, _usable_cores())),
                               num_parallel_calls=AUTOTUNE, deterministic=deterministic)

    batch_decodes = codec_for(config).batch_decodes

    parsing = _LABEL_SPEC if kept is None else kept.parsing

    def parse_and_decode_batch(batch: tf.Tensor) -> tuple[tf.Tensor, Any]:
        # Fixed-size pixels: one vectorized parse and one decode for the whole batch
        # (~1.6x the records/s of parsing one record per map call).
        images, parsed = parse_records(batch, config, **parsing)
        return images, _kept(parsed, parsing)

    def parse_and_decode(record: tf.Tensor) -> tuple[tf.Tensor, Any]:
        image, parsed = parse_record(record, config, **parsing)
        return image, _kept(parsed, parsing)

    if cache:
        # Decoded pixels are kept, so that later epochs neither parse nor decode: for JPEG storage
        # that per-record map, beside a CPU-bound training step, made epochs 2 and 3 of a small CNN
        # ~1.7x slower than the first (docs/benchmarks.md).
        _check_cache_fits(manifest["splits"].get(split, {}).get("written", 0), config.image_size)
        if batch_decodes:
            decoded = records.batch(_CACHE_DECODE_BATCH).map(
                parse_and_decode_batch, num_parallel_calls=AUTOTUNE, deterministic=deterministic).unbatch()
        else:
            decoded = records.map(parse_and_decode, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
        decoded = decoded.cache()
        if training:
            decoded = decoded.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            decoded = decoded.repeat()
        dataset = decoded.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE,
                                deterministic=deterministic)
    else:
        if training:  # Shuffle serialized records, before decoding (raw records are stored pixels).
            records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            records = records.repeat()
        if batch_decodes:
            dataset = records.batch(batch_size, drop_remainder=drop_remainder)
            dataset = dataset.map(parse_and_decode_batch, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
        else:
            dataset = records.map(parse_and_decode, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
            dataset = dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE,
                                    deterministic=deterministic)

    def targets(parsed: Any) -> Any:
        if kept is None:
            return labels_table.lookup(parsed)
        return kept.batch_columns(parsed, labels_table)

    def normalize_batch(images: tf.Tensor, label_text: Any) -> tuple[tf.Tensor, Any]:
        # One fused op for the whole batch, with the statistics of the saved TFT graph.
        return _normalize_fused(images, mean, std), targets(label_text)

    def augment_and_normalize_batch(batch: tuple[tf.Tensor, Any], batch_seed: tf.Tensor) -> tuple[tf.Tensor, Any]:
        images, label_text = batch
        randoms = tf.random.stateless_uniform([tf.shape(images)[0], 4], seed=batch_seed)
        return _augment_fused(images, mean, std, randoms), targets(label_text)

    if augment:
        # A seed per batch, paired with the batches in order before the parallel map: a stateful
        # random op inside that map draws in whatever order its calls happen to run, so the same
        # `seed` gave other crops from run to run.
        batch_seeds = tf.data.Dataset.random(seed=seed).batch(2)
        dataset = tf.data.Dataset.zip((dataset, batch_seeds)).map(
            augment_and_normalize_batch, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    else:
        dataset = dataset.map(normalize_batch, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if not repeat and input_context is None:
        # The number of batches is known from the manifest: Keras then shows progress totals and
        # does not warn "input ran out of data" at the end of each validation pass, and a split
        # whose shards hold fewer records than the manifest says fails instead of passing silently.
        records_in_split = manifest["splits"].get(split, {}).get("written", 0)
        batches = records_in_split // batch_size if drop_remainder else -(-records_in_split // batch_size)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(AUTOTUNE).with_options(options)


def _kept(parsed: dict[str, Any], parsing: Mapping[str, Any]) -> Any:
    """What a parse hands on: the label text alone (no `columns`: as always), or every parsed key but the image's."""
    if parsing is _LABEL_SPEC:
        return parsed[features.LABEL_TEXT]
    return {key: parsed[key] for key in parsing}


class _ColumnReader:
    """The kept columns `make_dataset(columns=...)` reads: their parse spec and a batch's tensors."""

    def __init__(self, spec: FeatureSpec, transform_output: tft.TFTransformOutput, names: Sequence[str] | None,
                 zscore: Sequence[str], statistics: Mapping[str, tuple[float, float]], output_dir: str) -> None:
        self.label_only = names is None  # A multi-label run read without `columns`: (images, multi-hot labels).
        names = () if names is None else names
        if isinstance(names, str):
            raise TypeError("columns must be a list of column names, not one string")
        try:
            chosen = tuple(spec.column(name) for name in dict.fromkeys(names))
        except KeyError as error:
            raise ValueError(error.args[0]) from None
        if any(column.name == "label" for column in chosen):
            raise ValueError("a kept column named 'label' cannot be read beside the run's label (the dict's 'label')")
        unknown = [name for name in zscore if name not in {c.name for c in chosen if c.type in (INT, FLOAT)}]
        if unknown:
            raise ValueError(f"zscore names {unknown[0]!r}, which is not an int or float column of `columns`")
        self.multi_label = spec.multi_label
        self.parsing: dict[str, Any] = dict(_LABEL_SPEC)
        self.parsing.update(column_parsing.parse_spec(FeatureSpec(chosen, spec.multi_label)))
        self._label_size = transform_output.vocabulary_size_by_name(features.LABEL_VOCABULARY)
        # The run's column statistics (column_stats.json, saved from the transform graph): the z-scores' mean and
        # std, a labels column's vocabulary. Read only when a chosen column needs them.
        needs_saved = any(column.type == LABELS and not column.box_classes for column in chosen) or any(
            name not in statistics for name in zscore)
        saved = load_column_stats(output_dir) if needs_saved else {}
        self._readers: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
            (column.name, self._reader(column, saved)) for column in chosen]
        self._moments = {name: statistics[name] if name in statistics else saved_moments(saved, name)
                         for name in zscore}

    def _reader(self, column: Column, saved: Mapping[str, Any]) -> Callable[[dict[str, Any]], Any]:
        keys = column.keys
        if column.type == BOXES:
            return lambda parsed: column_parsing.boxes(*(parsed[key] for key in keys))
        (key,) = keys
        if column.type in (INT, FLOAT):
            name = column.name

            def number(parsed: dict[str, Any]) -> tf.Tensor:
                if name in self._moments:  # Z-scored: float32, a missing value NaN.
                    return column_parsing.zscore(column_parsing.numbers(parsed[key]), *self._moments[name])
                if column.type == INT:  # Exact: int64, a missing value column_parsing.MISSING_INT.
                    return column_parsing.integers(parsed[key])
                return column_parsing.numbers(parsed[key])
            return number
        if column.type == TEXT:
            return lambda parsed: column_parsing.texts(parsed[key])
        if column.type == FLOATS or (column.type == LABELS and column.box_classes):
            return lambda parsed: column_parsing.ragged(parsed[key])
        table, size = column_vocabulary(saved, column)
        return lambda parsed: column_parsing.multi_hot(parsed[key], table, size)

    def batch_columns(self, parsed: dict[str, Any], labels_table: tf.lookup.StaticHashTable) -> dict[str, Any]:
        """A batch's parsed features -> {"label": ..., NAME: ...}."""
        label = parsed[features.LABEL_TEXT]
        out = {"label": column_parsing.multi_hot(label, labels_table, self._label_size) if self.multi_label
               else labels_table.lookup(label)}
        if self.label_only:
            return out["label"]
        out.update((name, read(parsed)) for name, read in self._readers)
        return out


def column_vocabulary(saved: Mapping[str, Any], column: Column) -> tuple[tf.lookup.StaticHashTable, int]:
    """(label -> id table, size) of a `labels` column's vocabulary as the run's statistics saved it
    (`column_stats.json`: most frequent first, ids in that order); ValueError naming the column when they have none."""
    vocabulary = (saved.get(column.name) or {}).get("vocabulary")
    if not vocabulary:
        raise ValueError(f"the run's statistics (column_stats.json) hold no vocabulary of the labels column "
                         f"{column.name!r}: it has no label in the train split")
    labels = [label for label, _ in vocabulary]
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(labels, tf.string), tf.range(len(labels), dtype=tf.int64)),
        default_value=features.UNKNOWN_LABEL_ID)
    return table, len(labels)


def saved_moments(saved: Mapping[str, Any], name: str) -> tuple[float, float]:
    """(mean, std) of a numeric column as the run's statistics saved them (column_stats.json, over the train
    split). ValueError naming the column when they have none (give `column_statistics` then)."""
    entry = saved.get(name) or {}
    if entry.get("mean") is None or entry.get("std") is None:
        raise ValueError(f"the run's statistics hold no mean and std of column {name!r} (no train image has a "
                         f"value): pass column_statistics={{{name!r}: (mean, std)}}")
    return float(entry["mean"]), float(entry["std"])
