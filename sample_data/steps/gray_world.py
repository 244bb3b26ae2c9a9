"""An example TF step for --image_step (docs/steps.md): a gray-world colour balance.

    beam-image-pipeline preprocess ... --image_step sample_data/steps/gray_world.py:gray_world
"""

import tensorflow as tf


def gray_world(image):
    """uint8 [H, W, 3] -> uint8 [H, W, 3] whose three channel means are equal (their mean)."""
    pixels = tf.cast(image, tf.float32)
    means = tf.reduce_mean(pixels, axis=[0, 1])
    balanced = pixels * (tf.reduce_mean(means) / tf.maximum(means, 1.0))
    return tf.cast(tf.clip_by_value(tf.round(balanced), 0.0, 255.0), tf.uint8)
