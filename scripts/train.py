"""Trains a small classifier on a Beam job's output, exports it for serving and serves one image.

    python scripts/train.py --output_dir output/sample --export_dir output/sample/serving_model \
        --predict_image sample_data/images/cat/cat_000.jpg

Shows the whole path a user takes: the reader feeds training (normalized per
batch by the job's TFT graph), `export_serving_model` writes a SavedModel whose
signature takes raw image bytes, and the reloaded SavedModel answers a request
built from an original image file, as TensorFlow Serving would.

Run again on the same job output with the same settings, it keeps the export it made (recorded in
EXPORT_DIR/training.json) instead of training a new one: a new export has new weights, so the predictions
and the table made with the old one would no longer fit it (the predict job refuses to mix two exports'
embeddings in one table). `--overwrite` trains again.
"""

import argparse
import json
import os
import sys

if __name__ == "__main__":  # Quiet by default, as the project's commands are (--verbose shows TF's start-up lines).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from beam_pipeline.common.quiet import quiet_startup

    quiet_startup(sys.argv[1:])

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from beam_pipeline.common.files import export_sha256  # noqa: E402
from beam_pipeline.common.job_shards import job_input_sha256  # noqa: E402
from tf_serving_input import export_serving_model, make_dataset  # noqa: E402
from tf_serving_input.features import UNKNOWN_LABEL_ID, load_preprocess_config  # noqa: E402
from tf_serving_input.layout import OutputLayout  # noqa: E402
from tf_serving_input.normalization import read_statistics  # noqa: E402
from tf_serving_input.serving import rest_instances_to_inputs, rest_request_body  # noqa: E402


def build_model(image_size, num_classes):
    """A small CNN: enough to separate the sample classes in a few CPU epochs."""
    return keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.AveragePooling2D(2, padding="same"),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu", padding="same"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu", padding="same"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu", padding="same"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(num_classes, activation="softmax"),
    ])


def known_labels_only(dataset):
    """The batches without their images of unknown label (UNKNOWN_LABEL_ID: unlabeled, or not in the vocabulary)."""
    def keep(images, labels):
        known = labels != UNKNOWN_LABEL_ID
        return tf.boolean_mask(images, known), tf.boolean_mask(labels, known)

    return dataset.map(keep, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).filter(
        lambda images, labels: tf.size(labels) > 0)


def with_known_length(dataset):
    """`dataset` (finite, the same batches each pass) with its number of batches, counted in one pass.

    Keras 3 warns "Your input ran out of data; interrupting training" the first time it reaches the end of a
    dataset whose length tf.data cannot tell (a reader's interleaved files, a filter), as validation's is: a
    warning about nothing, on a newcomer's first run.
    """
    batches = int(dataset.reduce(0, lambda count, _: count + 1))
    return dataset.apply(tf.data.experimental.assert_cardinality(batches))


TRAINING_RECORD = "training.json"  # In the export folder: what the export was trained on, and how.


def training_record(args, manifest):
    """What makes two trainings the same: the job output's images and statistics, and the training settings."""
    return {"job_input_sha256": job_input_sha256(manifest), "statistics": manifest["statistics"],
            "settings": {"epochs": args.epochs, "batch_size": args.batch_size, "seed": args.seed,
                         "validation_split": args.validation_split}}


def kept_export(export_dir, record):
    """Whether `export_dir` holds the export a training with this `record` made, unchanged since."""
    try:
        with open(os.path.join(export_dir, TRAINING_RECORD), encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return False
    return recorded.get("training") == record and recorded.get("export_sha256") == export_sha256(export_dir)


def main(argv=None):
    """Trains, evaluates, exports and serves one prediction; returns an exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True, help="The Beam job's --output_dir.")
    parser.add_argument("--export_dir", required=True, help="Where to write the serving SavedModel.")
    parser.add_argument("--predict_image", required=True, help="A raw image file to send to the served model.")
    # 10 epochs of the sample's 256 training images: 5 (40 steps) left cat and coffee crops apart only barely, and
    # the tour's cat_000.jpg was served as "coffee 0.662, cat 0.300" on some machines; 10 serve it as cat 0.99.
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--verbose", action="store_true", help="Show TensorFlow's start-up lines.")
    parser.add_argument("--validation_split", default="validation", help="Split used for validation accuracy.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true",
                        help="Train again even when --export_dir holds the export of a training on the same output "
                             "with the same settings (kept otherwise: the predictions made with it still fit).")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    config = load_preprocess_config(args.output_dir)
    _, _, vocabulary = read_statistics(args.output_dir)
    if len(vocabulary) < 2:
        print(f"error: {args.output_dir} has {len(vocabulary)} label(s); a classifier needs at least 2",
              file=sys.stderr)
        return 2

    manifest = OutputLayout(args.output_dir).load_manifest()
    record = training_record(args, manifest)
    if not args.overwrite and kept_export(args.export_dir, record):
        print(f"kept the export in {args.export_dir}: trained on this output with these settings "
              "(--overwrite trains again)")
    else:
        train_and_export(args, manifest, config, vocabulary, record)
    return serve_one_image(args, vocabulary)


def train_and_export(args, manifest, config, vocabulary, record):
    """Trains the classifier, exports it to args.export_dir and records what it was trained on."""
    record_path = os.path.join(args.export_dir, TRAINING_RECORD)
    if os.path.exists(record_path):  # Gone before the export changes: a run killed part-way keeps nothing.
        os.remove(record_path)
    train_images = manifest["splits"]["train"]["written"]
    steps_per_epoch = max(1, train_images // args.batch_size)
    # Unlabeled rows, and validation labels no training row has, read as id -1: the loss cannot take them.
    train = known_labels_only(make_dataset(args.output_dir, "train", batch_size=args.batch_size, training=True,
                                           seed=args.seed, repeat=True))
    validation = with_known_length(known_labels_only(make_dataset(
        args.output_dir, args.validation_split, batch_size=args.batch_size, training=False)))
    model = build_model(config.image_size, len(vocabulary))
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    print(f"Training on {args.output_dir} ({len(vocabulary)} classes: {', '.join(vocabulary)})", flush=True)
    model.fit(train, validation_data=validation, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
              shuffle=False, verbose=2)  # The reader already shuffles.
    _, accuracy = model.evaluate(validation, verbose=0)
    print(f"validation accuracy: {accuracy:.3f}")

    export_serving_model(model, args.output_dir, args.export_dir)
    with open(record_path, "w", encoding="utf-8") as f:
        json.dump({"training": record, "export_sha256": export_sha256(args.export_dir)}, f, indent=2)
    print(f"exported serving model: {args.export_dir} "
          f"(inspect with: saved_model_cli show --dir {args.export_dir} --all)")


def serve_one_image(args, vocabulary):
    """Answers one raw image's TensorFlow Serving request with the export, as TensorFlow Serving would."""
    body = rest_request_body([args.predict_image])
    request_path = os.path.join(args.export_dir, "predict_request.json")
    with open(request_path, "w", encoding="utf-8") as f:
        json.dump(body, f)
    # Answer the request body as TensorFlow Serving would: its instances become the signature's inputs.
    serve = tf.saved_model.load(args.export_dir).signatures[body["signature_name"]]
    inputs = rest_instances_to_inputs(body)
    result = serve(**{name: tf.constant(values) for name, values in inputs.items()})
    scores = result["scores"][0].numpy()
    top = scores.argsort()[::-1][:3]
    ranked = ", ".join(f"{vocabulary[i]} {scores[i]:.3f}" for i in top)
    print(f"served prediction for {args.predict_image}: {ranked} "
          f"(embedding: {result['embedding'].shape[-1]} floats)")
    preview = json.dumps(body)
    print(f"TensorFlow Serving REST body ({len(preview)} bytes, saved to {request_path}):\n"
          f"  {preview[:110]}...\"}}}}]}}\n"
          f"  curl -d @{request_path} http://localhost:8501/v1/models/MODEL:predict\n"
          f"The same model through TensorFlow Serving's loader: saved_model_cli run --dir {args.export_dir} "
          f"--tag_set serve --signature_def serving_default --inputs image_bytes=REQUEST.npy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
