"""The serving signature: raw image bytes in, the model's answer out, preprocessed as in training.

    export_serving_model(model, output_dir, export_dir)

The exported SavedModel decodes, orients and resizes each request image with
the very functions the Beam job used (`preprocessing.preprocess_image`), then
normalizes with `normalization.normalize_images` and the statistics held by
the tensorflow-transform graph the job saved (the reader does the same), then
runs the model. Nothing here re-implements a preprocessing step.
"""

import tensorflow as tf
import tensorflow_transform as tft

from tf_serving_input import features
from tf_serving_input.features import load_preprocess_config
from tf_serving_input.normalization import normalize_images, read_statistics
from tf_serving_input.preprocessing import decode_stored_image, preprocess_image

# TensorFlow Serving's REST API takes {"b64": ...} for inputs whose name ends in "_bytes".
IMAGE_BYTES_INPUT = "image_bytes"
EXAMPLES_INPUT = "examples"
BYTES_SIGNATURE = "serving_default"
EXAMPLES_SIGNATURE = "serving_examples"


class ServingModule(tf.Module):
    """Holds the model, the TFT layer and the label vocabulary, and the signature functions."""

    def __init__(self, model, output_dir):
        super().__init__()
        self.config = load_preprocess_config(output_dir)
        self.model = model
        mean, std, vocabulary = read_statistics(output_dir, tft.TFTransformOutput(output_dir))
        self.mean = tf.constant(mean, tf.float32)
        self.std = tf.constant(std, tf.float32)
        self.vocabulary = tf.constant(vocabulary or [""], tf.string)
        self.num_classes = len(vocabulary)
        size = self.config.image_size
        self._image_spec = tf.TensorSpec([size, size, 3], tf.uint8)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT)])
        def serve_image_bytes(image_bytes):
            """Raw encoded images (JPEG/PNG/GIF/BMP/WebP) -> model outputs."""
            return self._predict(self._preprocess_batch(image_bytes))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)])
        def serve_examples(examples):
            """Serialized tf.train.Examples as the Beam job writes them -> model outputs."""
            parsed = tf.io.parse_example(examples, {features.IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string)})
            images = tf.map_fn(lambda data: decode_stored_image(data, size, self.config.image_format),
                               parsed[features.IMAGE_ENCODED],
                               fn_output_signature=self._image_spec)
            return self._predict(images)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT)])
        def model_inputs(image_bytes):
            """Raw encoded images -> the normalized tensor the model sees (for parity checks)."""
            return self.normalize(self._preprocess_batch(image_bytes))

        self.serve_image_bytes = serve_image_bytes
        self.serve_examples = serve_examples
        self.model_inputs = model_inputs

    def _preprocess_batch(self, image_bytes):
        """Raw encoded images -> uint8 [B, S, S, 3], with the Beam job's preprocessing."""
        return tf.map_fn(lambda data: preprocess_image(data, self.config), image_bytes,
                         fn_output_signature=self._image_spec)

    def normalize(self, images):
        """uint8 [B, S, S, 3] -> the normalized float32 batch, with the job's statistics."""
        return normalize_images(images, self.mean, self.std)

    def _predict(self, images):
        outputs = self.model(self.normalize(images), training=False)
        if isinstance(outputs, dict):
            return outputs
        result = {"scores": outputs}
        if self.num_classes and outputs.shape.rank == 2 and outputs.shape[-1] == self.num_classes:
            class_ids = tf.argmax(outputs, axis=-1)
            result["class_ids"] = class_ids
            result["classes"] = tf.gather(self.vocabulary, class_ids)
        return result


def export_serving_model(model, output_dir, export_dir):
    """Writes a SavedModel to `export_dir` whose signatures apply the job's preprocessing.

    Signatures: 'serving_default' takes `image_bytes` (tf.string [None], raw
    encoded images) and 'serving_examples' takes `examples` (serialized
    tf.train.Examples from the job's shards). Both return 'scores' and, when
    the model outputs one score per label of the vocabulary, 'class_ids' and
    'classes' (label strings). Returns `export_dir`.
    """
    module = ServingModule(model, output_dir)
    signatures = {BYTES_SIGNATURE: module.serve_image_bytes.get_concrete_function(),
                  EXAMPLES_SIGNATURE: module.serve_examples.get_concrete_function()}
    tf.saved_model.save(module, export_dir, signatures=signatures)
    return export_dir
