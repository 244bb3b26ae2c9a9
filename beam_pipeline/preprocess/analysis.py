"""Full-pass statistics with tensorflow-transform: analyze, then save the transform graph."""

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata
from tfx_bsl.tfxio import tensor_adapter, tensor_to_arrow

from tf_serving_input import column_stats, normalization
from tf_serving_input.columns import FeatureSpec
from tf_serving_input.features import RAW_LABEL, RAW_PIXEL_MOMENTS
from tf_serving_input.layout import OutputLayout

# Rows (one per image: 7 int64 moments and a label) per Arrow RecordBatch for TFT.
DESIRED_BATCH_SIZE = 1000


def tensor_adapter_config(spec=FeatureSpec()):
    """The Arrow schema and tensor representations of the batches `to_record_batch` builds."""
    converter = tensor_to_arrow.TensorsToRecordBatchConverter(normalization.raw_batch_type_specs(spec))
    return tensor_adapter.TensorAdapterConfig(converter.arrow_schema(), converter.tensor_representations())


def _lists(items, arrow_type):
    """Each row's items (a sequence per row) as one LargeList column."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(row) for row in items], out=offsets[1:])
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array([v for row in items for v in row], arrow_type))


def _matrix(rows, width, dtype):
    """Rows of `width` numbers as one LargeList column of a dense [None, width] feature (as pixel_moments)."""
    offsets = np.arange(len(rows) + 1, dtype=np.int64) * width
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.asarray(rows, dtype).reshape(-1)))


def to_record_batch(moments, labels, spec=FeatureSpec(), values=None):
    """Per-image pixel moments (int64 [7] each) and label bytes -> the Arrow RecordBatch TFT analyzes.

    Built straight from one NumPy buffer (the layout tfx_bsl's converter makes; a
    test checks). A run that keeps columns (`spec`) also gives `values`: per row, its
    `column_stats.analysed` (None for a row that is no image: a shard's moment totals);
    a multi-label run's `labels` are a tuple of label bytes per row.
    """
    values_array = np.asarray(moments, dtype=np.int64).reshape(-1)
    rows = len(labels)
    moment_offsets = np.arange(rows + 1, dtype=np.int64) * normalization.MOMENTS
    moments_column = pa.LargeListArray.from_arrays(pa.array(moment_offsets), pa.array(values_array))
    if spec.multi_label:
        label_column = _lists(labels, pa.large_binary())
    else:
        label_column = pa.LargeListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int64)),
                                                     pa.array(labels, pa.large_binary()))
    columns = {RAW_PIXEL_MOMENTS: moments_column, RAW_LABEL: label_column}
    if spec != FeatureSpec():
        width = 1 + len(spec.columns)
        none = ([0] * width, [0] * width, [0] * width, [0.0] * width, [])
        analysed = [row if row is not None else none for row in values]
        columns[column_stats.RAW_IMAGES] = _matrix([[int(row is not None)] for row in values], 1, np.int64)
        for at, name in enumerate((column_stats.RAW_PRESENT, column_stats.RAW_ITEMS, column_stats.RAW_WHOLE)):
            columns[name] = _matrix([row[at] for row in analysed], width, np.int64)
        columns[column_stats.RAW_REAL] = _matrix([row[3] for row in analysed], width, np.float32)
        columns[column_stats.RAW_LABELS] = _lists([row[4] for row in analysed], pa.large_binary())
    names = sorted(columns)  # tfx_bsl orders the schema's fields by name.
    return pa.RecordBatch.from_arrays([columns[name] for name in names], names=names)


def raw_metadata(spec=FeatureSpec()):
    """The raw schema of what the shard writer emits for analysis."""
    return dataset_metadata.DatasetMetadata.from_feature_spec(normalization.raw_feature_spec(spec))


class AnalyzeAndSave(beam.PTransform):
    """Arrow RecordBatches of {'pixel_moments', 'label'} (and, with kept columns, `images` and `column_*`)
    -> DIR/transform_fn, transformed_metadata, metadata.

    Arrow is TFT's fast input path (instance dicts are its slow one).
    """

    def __init__(self, output_dir, temp_dir, spec=FeatureSpec()):
        super().__init__()
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._spec = spec

    def expand(self, record_batches):
        metadata = raw_metadata(self._spec)
        analyse = (normalization.preprocessing_fn if self._spec == FeatureSpec()
                   else normalization.column_preprocessing_fn(self._spec))
        with tft_beam.Context(temp_dir=self._temp_dir, desired_batch_size=DESIRED_BATCH_SIZE):
            # Only the statistics are needed, so AnalyzeDataset reads its input once
            # (AnalyzeAndTransformDataset would read it twice).
            transform_fn = ((record_batches, tensor_adapter_config(self._spec))
                            | "Analyze" >> tft_beam.AnalyzeDataset(analyse))
            # (saved transform graph, transformed metadata)
            written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(self._output_dir)
        _ = metadata | "WriteRawMetadata" >> tft_beam.WriteMetadata(
            OutputLayout(self._output_dir).raw_metadata_dir, record_batches.pipeline)
        return written
