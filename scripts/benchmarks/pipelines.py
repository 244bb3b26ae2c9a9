"""The reader's baselines, as a user would write them with tf.data (no project code inside).

- the tf.data performance guide's "before" (a Python function per image through numpy_function)
  and "after" (TF ops, parallel maps, batch-level normalization, prefetch), from the JPEGs;
- Keras' image_dataset_from_directory, from the JPEGs;
- same work: plain tf.data over the job's own records, one record per parse and decode call and
  one image per normalization, what the reader does in batches: it shows what that design buys.
Each yields (float32 normalized images [B, 224, 224, 3], labels [B]).
"""

import numpy as np
from PIL import Image

SIZE = 224


def _rows(csv_path):
    import tensorflow as tf

    return tf.data.experimental.CsvDataset(csv_path, [tf.string, tf.string], header=True, select_cols=[0, 1])


def after_pipeline(csv_path, mean, std, batch, step=None):
    """The guide's 'after': decode and resize with TF ops in parallel maps, normalize per batch, prefetch.

    One pass over the CSV's rows (repeat it to measure a rate). `step`: a Python function on NumPy
    uint8 [H, W, 3] (a user's own step), run between decode and resize the usual way,
    `map(tf.py_function(step), num_parallel_calls=AUTOTUNE)`: each call takes the GIL, so only a step
    that releases it inside (NumPy's array loops) runs on several tf.data threads at once.
    """
    import tensorflow as tf

    mean_t, std_t = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)

    def decode(path, label):
        return tf.io.decode_jpeg(tf.io.read_file(path), channels=3), label

    def resize_crop(image, label):
        shape = tf.cast(tf.shape(image)[:2], tf.float32)
        scale = SIZE / tf.reduce_min(shape)
        new_size = tf.cast(tf.math.ceil(shape * scale), tf.int32)
        image = tf.image.resize(image, new_size)
        return tf.image.resize_with_crop_or_pad(image, SIZE, SIZE), label

    def normalize(images, labels):
        return (images - mean_t) / std_t, labels

    def run_step(image, label):
        out = tf.py_function(lambda pixels: step(pixels.numpy()), [image], tf.uint8)
        out.set_shape([None, None, 3])
        return out, label

    rows = _rows(csv_path).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    if step is not None:
        rows = rows.map(run_step, num_parallel_calls=tf.data.AUTOTUNE)
    return (rows.map(resize_crop, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def classic_pipelines(csv_path, image_dir, mean, std, batch):
    """{name: repeating dataset}: the guide's 'before' and 'after' and image_dataset_from_directory."""
    import keras
    import tensorflow as tf

    mean_t, std_t = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)

    def python_load(path):
        image = Image.open(path.decode()).convert("RGB")
        scale = SIZE / min(image.size)
        image = image.resize((max(SIZE, round(image.width * scale)), max(SIZE, round(image.height * scale))),
                             Image.Resampling.BILINEAR)
        left, top = (image.width - SIZE) // 2, (image.height - SIZE) // 2
        pixels = np.asarray(image.crop((left, top, left + SIZE, top + SIZE)), np.float32)
        return (pixels - np.array(mean, np.float32)) / np.array(std, np.float32)

    def before_map(path, label):
        image = tf.numpy_function(python_load, [path], tf.float32)
        image.set_shape([SIZE, SIZE, 3])
        return image, label

    def normalize(images, labels):
        return (images - mean_t) / std_t, labels

    before = _rows(csv_path).map(before_map, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    from_directory = keras.utils.image_dataset_from_directory(
        image_dir, image_size=(SIZE, SIZE), batch_size=batch, crop_to_aspect_ratio=True, shuffle=False,
        verbose=False).map(normalize, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    return {"before (numpy_function)": before.batch(batch).repeat(),
            "after (TF ops, parallel)": after_pipeline(csv_path, mean, std, batch).repeat(),
            "image_dataset_from_directory": from_directory.repeat()}


def same_work_pipeline(files, feature_key, image_size, vocabulary, mean, std, batch):
    """Plain tf.data over the job's records: parse and decode one record per call, normalize one image per call.

    `feature_key` is where the records hold the image; raw pixels are decoded with decode_raw,
    encoded ones with decode_image. Labels map to their index in `vocabulary` (-1 when unknown),
    as the reader's. Repeats forever.
    """
    import tensorflow as tf

    mean_t, std_t = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
    labels = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(vocabulary, tf.string),
                                            tf.range(len(vocabulary), dtype=tf.int64)), default_value=-1)
    spec = {feature_key: tf.io.FixedLenFeature([], tf.string),
            "label/text": tf.io.FixedLenFeature([], tf.string, default_value="")}
    raw = feature_key == "image/raw"

    def parse_and_decode(record):
        parsed = tf.io.parse_single_example(record, spec)
        if raw:
            image = tf.reshape(tf.io.decode_raw(parsed[feature_key], tf.uint8), [image_size, image_size, 3])
        else:
            image = tf.io.decode_image(parsed[feature_key], channels=3, expand_animations=False)
        return image, labels.lookup(parsed["label/text"])

    def normalize(image, label):
        return (tf.cast(image, tf.float32) - mean_t) / std_t, label

    return (tf.data.TFRecordDataset(files, num_parallel_reads=tf.data.AUTOTUNE).repeat()
            .map(parse_and_decode, num_parallel_calls=tf.data.AUTOTUNE)
            .map(normalize, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch).prefetch(tf.data.AUTOTUNE))
