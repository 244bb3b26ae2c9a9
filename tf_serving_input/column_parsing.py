"""The kept columns read back with TensorFlow: a parse spec from features.json alone, and a batch's tensors.

    spec = load_feature_spec(output_dir)                       # features.json (tf_serving_input.columns)
    parsed = tf.io.parse_single_example(record, parse_spec(spec))

`load_feature_spec` (`tf_serving_input.columns`, no TensorFlow) reads features.json checked against the manifest.
`parse_spec` gives a `tf.io.VarLenFeature` for every key of every kept column (and for
`label/text` in a multi-label run): a missing value is an absent feature, so every key
may hold no value. The reader (`reader.make_dataset(..., columns=[...])`) parses with the
same spec and turns a batch's sparse values into model inputs with the functions below:
`integers` (an int column: int64 [B], `MISSING_INT` where missing), `numbers` (a float column:
float32 [B], NaN where missing), `texts` (string [B], '' where missing),
`multi_hot` (float32 [B, V] in vocabulary order), `ragged` (floats, box classes) and
`boxes` (float32 ragged [B, None, 4]). `zscore` standardizes numbers with a mean and std.
"""

from __future__ import annotations

import math

import tensorflow as tf

from tf_serving_input import features
from tf_serving_input.columns import (
    BOXES,
    FLOAT,
    FLOATS,
    INT,
    LABELS,
    MISSING_INT,
    TEXT,
    FeatureSpec,
    load_feature_spec,
)

__all__ = ["DTYPES", "MISSING_INT", "boxes", "integers", "load_feature_spec", "multi_hot", "numbers", "parse_spec",
           "ragged", "texts", "zscore"]

DTYPES = {INT: tf.int64, FLOAT: tf.float32, TEXT: tf.string, LABELS: tf.string, FLOATS: tf.float32,
          BOXES: tf.float32}


def parse_spec(spec: FeatureSpec) -> dict[str, tf.io.VarLenFeature]:
    """{feature key: VarLenFeature} of every kept column, and of `label/text` when the run is multi-label.

    Give it to `tf.io.parse_single_example` / `parse_example` (add the image's own keys as needed): each
    value comes back as a SparseTensor, empty where the record left the feature out.
    """
    parsed = {key: tf.io.VarLenFeature(DTYPES[column.type]) for column in spec.columns for key in column.keys}
    if spec.multi_label:
        parsed[features.LABEL_TEXT] = tf.io.VarLenFeature(tf.string)
    return parsed


def _filled(values: tf.SparseTensor, default: float | str | int) -> tf.Tensor:
    """The first value of each row of a [B, N] SparseTensor as a dense [B] tensor, `default` where none."""
    dense = tf.sparse.to_dense(values, default_value=default)
    padding = tf.fill([tf.shape(dense)[0], 1], tf.constant(default, dense.dtype))
    return tf.concat([dense, padding], axis=1)[:, 0]  # N may be 0: every value of the batch missing.


def integers(values: tf.SparseTensor) -> tf.Tensor:
    """An int column's [B, N] SparseTensor -> int64 [B], exact (an id over 2**24 is not rounded to a float32),
    `MISSING_INT` where the value is missing (no int is: the job refuses that one value as a cell)."""
    return _filled(values, MISSING_INT)


def numbers(values: tf.SparseTensor) -> tf.Tensor:
    """A float column's (or a z-scored int column's) [B, N] SparseTensor -> float32 [B], NaN where the value is
    missing."""
    as_float = tf.SparseTensor(values.indices, tf.cast(values.values, tf.float32), values.dense_shape)
    return _filled(as_float, math.nan)


def texts(values: tf.SparseTensor) -> tf.Tensor:
    """A text column's [B, N] SparseTensor -> string [B], '' where the value is missing (a text is never '')."""
    return _filled(values, "")


def multi_hot(values: tf.SparseTensor, table: tf.lookup.StaticHashTable, size: int) -> tf.Tensor:
    """A labels column's [B, N] SparseTensor -> float32 [B, size]: 1 at each label's vocabulary id.

    `table` maps a label to its id (negative for a label outside the vocabulary: left out).
    """
    ids = table.lookup(values.values)
    known = ids >= 0
    where = tf.stack([tf.boolean_mask(values.indices[:, 0], known), tf.boolean_mask(ids, known)], axis=1)
    hits = tf.scatter_nd(where, tf.ones_like(where[:, 0], tf.float32), [values.dense_shape[0], size])
    return tf.minimum(hits, 1.0)  # A label twice in a row counts once.


def ragged(values: tf.SparseTensor) -> tf.RaggedTensor:
    """A floats or labels column's [B, N] SparseTensor -> its values, ragged [B, None] (missing: no values)."""
    return tf.RaggedTensor.from_sparse(values)


def boxes(xmin: tf.SparseTensor, ymin: tf.SparseTensor, xmax: tf.SparseTensor, ymax: tf.SparseTensor
          ) -> tf.RaggedTensor:
    """The boxes' four [B, N] SparseTensors -> float32 ragged [B, None, 4] (xmin, ymin, xmax, ymax)."""
    first = tf.RaggedTensor.from_sparse(xmin)
    corners = tf.stack([first.values] + [tf.RaggedTensor.from_sparse(part).values for part in (ymin, xmax, ymax)],
                       axis=1)
    return tf.RaggedTensor.from_row_splits(corners, first.row_splits)


def zscore(values: tf.Tensor, mean: float | tf.Tensor, std: float | tf.Tensor) -> tf.Tensor:
    """(values - mean) / std, as the pixels are normalized: a std of 0 leaves the values centred, unscaled.
    NaN (a missing value) stays NaN."""
    std = tf.convert_to_tensor(std, tf.float32)
    return (values - mean) / tf.where(std > 0.0, std, tf.ones_like(std))
