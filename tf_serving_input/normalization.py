"""The one normalization of the project: a tensorflow-transform preprocessing_fn.

The Beam job analyzes the `train` split with it (per-channel mean and
standard deviation of the preprocessed pixels, the label vocabulary) and saves
the resulting graph; the reader applies that saved graph to whole batches and
the serving signature to each request. Nobody types the statistics twice.
"""

import tensorflow as tf
import tensorflow_transform as tft

from tf_serving_input import features


def raw_feature_spec(image_size):
    """The raw features the transform graph takes: float pixels in [0, 255] and the label text."""
    return {
        features.RAW_IMAGE: tf.io.FixedLenFeature([image_size, image_size, 3], tf.float32),
        features.RAW_LABEL: tf.io.FixedLenFeature([], tf.string),
    }


def raw_batch_type_specs(image_size):
    """Type specs of a batch of raw features, as the Beam job hands them to TFT in Arrow form."""
    return {
        features.RAW_IMAGE: tf.TensorSpec([None, image_size, image_size, 3], tf.float32),
        features.RAW_LABEL: tf.TensorSpec([None], tf.string),
    }


def _channel_mean_and_std(image):
    """Per-channel mean and population std of [B, S, S, 3] images of integer pixel values.

    Computed from exact int64 sums (tft.sum, tft.size), so the result does not
    depend on how the data was split into batches and bundles: the same input
    gives bit-identical statistics whatever the worker count. float32 running
    means would differ in the last digits from run to run.
    """
    # Exact integers all the way: per-image sums fit int32 (<= 255 * S * S), squares need
    # int64; the analyzers then add per-image rows up across the dataset.
    pixels = tf.cast(tf.reshape(tf.round(image), [tf.shape(image)[0], -1, 3]), tf.int32)
    per_image_sum = tf.cast(tf.reduce_sum(pixels, axis=1), tf.int64)
    per_image_squares = tf.reduce_sum(tf.cast(pixels * pixels, tf.int64), axis=1)
    total = tf.cast(tft.sum(per_image_sum, reduce_instance_dims=False), tf.float64)
    squares = tf.cast(tft.sum(per_image_squares, reduce_instance_dims=False), tf.float64)
    pixels_per_image = tf.cast(tf.shape(pixels)[1], tf.float64)
    count = tf.cast(tf.maximum(tft.size(per_image_sum[:, 0]), 1), tf.float64) * pixels_per_image
    mean = total / count
    variance = tf.maximum(squares / count - mean * mean, 0.0)
    std = tf.sqrt(variance)
    # A constant channel has no spread to divide by: leave it centred but unscaled.
    std = tf.where(std > 0.0, std, tf.ones_like(std))
    return tf.cast(mean, tf.float32), tf.cast(std, tf.float32)


def normalize_images(images, mean, std):
    """(pixels - mean) / std per channel, float32: the one normalization formula.

    The TFT graph below is built with it; the reader applies it to whole
    batches with the statistics read from that graph (`read_statistics`).
    """
    images = tf.cast(images, tf.float32)
    # Broadcasting a [3] vector over the last axis runs ~2.5x slower than subtracting and
    # multiplying by whole [S, S, 3] planes, which broadcast over the batch axis only.
    plane = tf.shape(images)[-3:]
    return (images - tf.broadcast_to(mean, plane)) * tf.broadcast_to(1.0 / std, plane)


def preprocessing_fn(inputs):
    """Normalizes images per channel and maps labels to ids, with full-pass statistics.

    Outputs: 'image' ((pixels - mean) / std, float32 [B, S, S, 3]), 'label'
    (int64 id in the vocabulary, UNKNOWN_LABEL_ID for '' or unseen labels) and
    the statistics themselves as 'pixel_mean' and 'pixel_std' ([B, 3]), so any
    caller can read them back from the saved graph.
    """
    image = inputs[features.RAW_IMAGE]
    mean, std = _channel_mean_and_std(image)
    normalized = normalize_images(image, mean, std)

    label = inputs[features.RAW_LABEL]
    # Unlabeled rows (label '') weigh nothing, so '' never enters the vocabulary.
    has_label = tf.cast(tf.strings.length(label) > 0, tf.float32)
    label_id = tft.compute_and_apply_vocabulary(
        label, default_value=features.UNKNOWN_LABEL_ID, weights=has_label,
        vocab_filename=features.LABEL_VOCABULARY)

    batch = tf.shape(image)[0]
    return {
        features.TRANSFORMED_IMAGE: normalized,
        features.TRANSFORMED_LABEL: label_id,
        features.TRANSFORMED_PIXEL_MEAN: tf.broadcast_to(mean, [batch, 3]),
        features.TRANSFORMED_PIXEL_STD: tf.broadcast_to(std, [batch, 3]),
    }


def read_statistics(output_dir, image_size, transform_output=None):
    """Returns (mean, std, vocabulary) as the saved transform graph holds them.

    mean and std are lists of 3 floats (RGB); vocabulary is the list of label
    strings in id order. `transform_output` is loaded from output_dir if None.
    """
    transform_output = transform_output or tft.TFTransformOutput(output_dir)
    probe = {features.RAW_IMAGE: tf.zeros([1, image_size, image_size, 3], tf.float32),
             features.RAW_LABEL: tf.constant([""])}
    outputs = transform_output.transform_raw_features(probe)
    mean = outputs[features.TRANSFORMED_PIXEL_MEAN][0].numpy().tolist()
    std = outputs[features.TRANSFORMED_PIXEL_STD][0].numpy().tolist()
    vocabulary = [v.decode("utf-8") if isinstance(v, bytes) else v
                  for v in transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    # TFT stores a placeholder token when nothing was labeled (tables cannot be empty).
    empty_placeholder = tft.analyzers.get_empy_vocabulary_dummy_value(tf.string)[1].decode()
    if vocabulary == [empty_placeholder]:
        vocabulary = []
    return mean, std, vocabulary
