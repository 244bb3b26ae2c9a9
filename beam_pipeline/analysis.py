"""Full-pass statistics with tensorflow-transform: analyze, then save the transform graph."""

import apache_beam as beam
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import dataset_metadata

from tf_serving_input import normalization

# TFT batches instances before running its analyzers. Each of ours is an S x S x 3
# float32 image (600 KB at 224): TFT's default of up to 1000 a batch would
# hold ~600 MB per worker. This keeps a batch near 20 MB at 224.
DESIRED_BATCH_SIZE = 32


def raw_metadata(image_size):
    """The raw schema of what the shard writer emits for analysis."""
    return dataset_metadata.DatasetMetadata.from_feature_spec(
        normalization.raw_feature_spec(image_size))


class AnalyzeAndSave(beam.PTransform):
    """{'image', 'label'} instances -> statistics -> DIR/transform_fn, transformed_metadata, metadata."""

    def __init__(self, output_dir, image_size, temp_dir):
        super().__init__()
        self._output_dir = output_dir
        self._image_size = image_size
        self._temp_dir = temp_dir

    def expand(self, instances):
        metadata = raw_metadata(self._image_size)
        with tft_beam.Context(temp_dir=self._temp_dir, desired_batch_size=DESIRED_BATCH_SIZE):
            # Only the statistics are needed, so AnalyzeDataset reads the images once
            # (AnalyzeAndTransformDataset would read them twice).
            transform_fn = ((instances, metadata)
                            | "Analyze" >> tft_beam.AnalyzeDataset(normalization.preprocessing_fn))
            # (saved transform graph, transformed metadata)
            written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(self._output_dir)
        _ = metadata | "WriteRawMetadata" >> tft_beam.WriteMetadata(
            f"{self._output_dir.rstrip('/')}/metadata", instances.pipeline)
        return written
