"""The serving export: raw image bytes in, the model's answer out, preprocessed as in training.

    export_serving_model(model, output_dir, export_dir)

The exported SavedModel decodes, orients and resizes each request image with
the very functions the Beam job used (`preprocessing.preprocess_image`), then
normalizes with `normalization.normalize_images` and the statistics held by
the tensorflow-transform graph the job saved (the reader does the same), then
runs the model. Nothing here re-implements a preprocessing step.

It is written with Keras's `ExportArchive`, so it loads where TensorFlow
Serving loads models: the C++/TF1 session loader (`LoadSavedModel`,
`tf.compat.v1.saved_model.loader.load`, `saved_model_cli run`) restores the
model's variables through the saver. A Keras 3 model held by a `tf.Module` and
saved with `tf.saved_model.save` loads with `tf.saved_model.load` only; the
session loader then fails with "Could not find variable ..."
(tensorflow/serving#2250).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import keras
import tensorflow as tf
import tensorflow_transform as tft

from tf_serving_input.codecs import parse_records
from tf_serving_input.features import load_preprocess_config
from tf_serving_input.normalization import normalize_images, read_statistics
from tf_serving_input.preprocessing import preprocess_image
from tf_serving_input.steps import BATCH, PYTHON, StepRecord, load, records_of, run_batch_steps, trace, trace_batch

# TensorFlow Serving's REST API takes {"b64": ...} for inputs whose name ends in "_bytes".
IMAGE_BYTES_INPUT = "image_bytes"
EXAMPLES_INPUT = "examples"
BYTES_SIGNATURE = "serving_default"
EXAMPLES_SIGNATURE = "serving_examples"
# Images after the whole preprocessing (decode, the steps, resize): the export of a run with a Python step
# (`images_after_steps=True`) has it instead of serving_default, whose graph cannot hold the step.
IMAGES_SIGNATURE = "serving_images"
IMAGES_INPUT = "images"
# Output names of both signatures.
SCORES = "scores"
CLASS_IDS = "class_ids"
CLASSES = "classes"
EMBEDDING = "embedding"
# What the export is, for the predict job and search: written beside the SavedModel, where
# TensorFlow Serving ignores it (assets.extra holds only optional extras such as warm-up data).
INFO_FILE = "assets.extra/beam_image_pipeline.json"


def embedding_tensor(model: keras.Model, embedding_layer: str | None = None) -> keras.KerasTensor:
    """The symbolic tensor the export returns as `embedding`, flattened to [B, D].

    `embedding_layer=None` takes the penultimate layer: the input of the
    model's last layer (for a classifier, the features its final Dense layer
    reads). A layer name takes that layer's output instead.
    """
    try:
        tensor = (model.get_layer(embedding_layer).output if embedding_layer
                  else model.layers[-1].input)
    except (AttributeError, ValueError) as error:
        where = f"layer {embedding_layer!r}" if embedding_layer else "the penultimate layer"
        raise ValueError(f"cannot take the embedding from {where} of {model.name!r}: {error}. "
                         "Export a Sequential or functional Keras model, or pass "
                         "embedding_layer=False to export without an embedding") from None
    if isinstance(tensor, (list, tuple)):
        raise ValueError(f"the last layer of {model.name!r} takes {len(tensor)} inputs; name the "
                         "embedding layer with embedding_layer=NAME")
    if len(tensor.shape) != 2:
        tensor = keras.layers.Flatten(name="embedding_flatten")(tensor)
    return tensor


def _serving_model(model: keras.Model, embedding_layer: str | Literal[False] | None) -> tuple[keras.Model, bool]:
    """`model` as a Keras model whose outputs are {'scores': ..., 'embedding': ...} (embedding optional)."""
    if embedding_layer is False:
        return model, False
    if len(model.outputs) != 1:
        raise ValueError(f"{model.name!r} has {len(model.outputs)} outputs; the export serves a model "
                         "with one output (its scores)")
    outputs = {SCORES: model.outputs[0], EMBEDDING: embedding_tensor(model, embedding_layer)}
    return keras.Model(model.inputs, outputs, name=f"{model.name}_serving"), True


def recorded_tf_steps(output_dir: str, image_size: int | None = None, images_after_steps: bool = False) -> tuple[
        list[tuple[str, Any]], list[StepRecord], list[tuple[str, Any]]]:
    """The run's --image_step steps, loaded and traced for the export: ([(name, traced)] of the per-image
    steps, records, [(name, traced)] of the `@batch_step`s, for images of side `image_size`).

    Code is loaded only from the file (or module) the run's manifest records, and only when its
    SHA-256 is the recorded one (`steps.load`; StepRefused otherwise). A Python step cannot be
    served: ValueError naming it and the ways out, unless `images_after_steps` (then no step is
    loaded: the export takes images after them).
    """
    from tf_serving_input.layout import OutputLayout

    records = records_of(OutputLayout(output_dir).load_manifest()["config"])
    for record in records:
        if record.kind == PYTHON:
            if images_after_steps:
                return [], records, []
            raise ValueError(
                f"step {record.position + 1} of {output_dir}, {record.spec}, is a Python step (@python_step), which "
                "a SavedModel cannot hold: rewrite it in TF ops (an unmarked function of a uint8 tensor), or export "
                "with images_after_steps=True: signatures on images that already went through the steps "
                "('serving_examples' on the stored records, 'serving_images')")
    per_image = [(record.name, trace(load(record), record)) for record in records if record.kind != BATCH]
    batch = [(record.name, trace_batch(load(record), record, image_size)) for record in records
             if record.kind == BATCH]
    return per_image, records, batch


def export_serving_model(model: keras.Model, output_dir: str, export_dir: str,
                         embedding_layer: str | Literal[False] | None = None, images_after_steps: bool = False) -> str:
    """Writes a SavedModel to `export_dir` whose signatures apply the job's preprocessing.

    Signatures: 'serving_default' takes `image_bytes` (tf.string [None], raw
    encoded images) and 'serving_examples' takes `examples` (serialized
    tf.train.Examples from the job's shards). Both return 'scores' (the
    model's output), 'embedding' (float32 [B, D]: the penultimate layer's
    output by default, the layer named `embedding_layer` otherwise, none with
    `embedding_layer=False`) and, when the model outputs one score per label of
    the vocabulary, 'class_ids' and 'classes' (label strings).

    A run made with `--image_step` TF steps (`@batch_step`s too) is exported with them, read from the
    run's manifest: each is loaded from the file (or module) recorded there and
    only when its SHA-256 matches (export only runs you trust: their steps' code
    runs here). A run with a Python step is refused (`recorded_tf_steps`), unless
    `images_after_steps=True`: then no signature takes raw bytes (it would skip the step), and
    'serving_images' takes `images` (uint8 [None, S, S, 3]: images after decode, the steps and
    the resize, as the job stores them), beside 'serving_examples'; 'serving_default' is an alias
    of 'serving_images' (TF Serving needs one). Search and the UI run the steps themselves before
    it, loaded only from the specs their user names.

    Every TensorFlow loader serves it: `tf.saved_model.load`, the session
    loader TensorFlow Serving uses, and `saved_model_cli run`. Returns
    `export_dir`.
    """
    config = load_preprocess_config(output_dir)
    tf_steps, step_records, batch_steps = recorded_tf_steps(output_dir, config.image_size, images_after_steps)
    steps_outside = any(record.kind == PYTHON for record in step_records)
    mean, std, vocabulary = read_statistics(output_dir, tft.TFTransformOutput(output_dir))
    mean, std = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
    vocabulary_tensor = tf.constant(vocabulary or [""], tf.string)
    serving_model, with_embedding = _serving_model(model, embedding_layer)
    embedding_size = int(serving_model.output[EMBEDDING].shape[-1]) if with_embedding else 0
    size = config.image_size
    image_spec = tf.TensorSpec([size, size, 3], tf.uint8)

    def predict(images: tf.Tensor) -> dict[str, tf.Tensor]:
        outputs = serving_model(normalize_images(images, mean, std), training=False)
        scores = outputs[SCORES] if with_embedding else outputs
        result = {SCORES: scores}
        if with_embedding:
            result[EMBEDDING] = tf.cast(outputs[EMBEDDING], tf.float32)
        if vocabulary and scores.shape.rank == 2 and scores.shape[-1] == len(vocabulary):
            class_ids = tf.argmax(scores, axis=-1)
            result[CLASS_IDS] = class_ids
            result[CLASSES] = tf.gather(vocabulary_tensor, class_ids)
        return result

    def serve_image_bytes(image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        """Raw encoded images (JPEG/PNG/GIF/BMP/WebP) -> model outputs."""
        images = tf.map_fn(lambda data: preprocess_image(data, config, tf_steps), image_bytes,
                           fn_output_signature=image_spec)
        return predict(run_batch_steps(images, batch_steps))  # The `@batch_step`s, on the resized batch.

    def serve_examples(examples: tf.Tensor) -> dict[str, tf.Tensor]:
        """Serialized tf.train.Examples as the Beam job writes them -> model outputs."""
        return predict(parse_records(examples, config)[0])

    archive = keras.export.ExportArchive()
    archive.track(serving_model)
    if images_after_steps:  # First: with a Python step, serving_default is its alias (TF Serving needs one).
        archive.add_endpoint(IMAGES_SIGNATURE, predict,
                             input_signature=[tf.TensorSpec([None, size, size, 3], tf.uint8, name=IMAGES_INPUT)])
    if not steps_outside:  # Raw bytes would skip a Python step: never served silently without it.
        archive.add_endpoint(BYTES_SIGNATURE, serve_image_bytes,
                             input_signature=[tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT)])
    archive.add_endpoint(EXAMPLES_SIGNATURE, serve_examples,
                         input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)])
    archive.write_out(export_dir, verbose=False)
    info = {"preprocess": config.to_dict(), "vocabulary": vocabulary, "embedding_size": embedding_size,
            "embedding_layer": (embedding_layer or "penultimate") if with_embedding else None,
            "pixel_mean": mean.numpy().tolist(), "pixel_std": std.numpy().tolist(),
            **({"image_steps": [record.to_dict() for record in step_records]} if step_records else {}),
            **({"steps_outside": True} if steps_outside else {})}
    tf.io.gfile.makedirs(f"{export_dir.rstrip('/')}/assets.extra")
    with tf.io.gfile.GFile(f"{export_dir.rstrip('/')}/{INFO_FILE}", "w") as f:
        f.write(json.dumps(info, indent=1))
    return export_dir


@dataclasses.dataclass(frozen=True)
class ExportInfo:
    """What an export of `export_serving_model` is: its preprocessing, labels and embedding size."""

    preprocess: dict[str, Any]
    vocabulary: list[str]
    embedding_size: int
    embedding_layer: str | None
    # The run's steps; with `steps_outside`, serving_images takes images after them (no serving_default).
    image_steps: tuple[StepRecord, ...] = ()
    steps_outside: bool = False
    INFO_FILE = INFO_FILE

    @staticmethod
    def signature(records: bool) -> tuple[str, str]:
        """(signature, input name) for serialized job records (True) or raw image bytes (False)."""
        return (EXAMPLES_SIGNATURE, EXAMPLES_INPUT) if records else (BYTES_SIGNATURE, IMAGE_BYTES_INPUT)


def read_export_info(export_dir: str) -> ExportInfo:
    """The ExportInfo of an export; FileNotFoundError naming the folder when it is not one of ours."""
    from tf_serving_input.layout import join, read_text

    path = join(export_dir, INFO_FILE)
    try:
        info = json.loads(read_text(path))
    except (FileNotFoundError, tf.errors.NotFoundError):
        raise FileNotFoundError(f"{path} not found: is {export_dir} a model written by export_serving_model "
                                "(scripts/train.py)? Exports from before the embedding output must be "
                                "re-exported") from None
    return ExportInfo(preprocess=info["preprocess"], vocabulary=info["vocabulary"],
                      embedding_size=info["embedding_size"], embedding_layer=info["embedding_layer"],
                      image_steps=tuple(records_of(info)), steps_outside=bool(info.get("steps_outside")))


def rest_request_body(image_paths: Iterable[str | os.PathLike[str]],
                      signature_name: str = BYTES_SIGNATURE) -> dict[str, Any]:
    """The JSON body of a TensorFlow Serving REST `:predict` call for image files (row format)."""
    instances = []
    for path in image_paths:
        with open(path, "rb") as f:
            instances.append({IMAGE_BYTES_INPUT: {"b64": base64.b64encode(f.read()).decode("ascii")}})
    return {"signature_name": signature_name, "instances": instances}


def rest_instances_to_inputs(body: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The signature inputs TensorFlow Serving builds from a REST row-format body: {name: [values]}.

    Each `{"b64": ...}` value becomes the bytes it encodes, as the server decodes it.
    """
    inputs: dict[str, list[Any]] = {}
    for instance in body["instances"]:
        for name, value in instance.items():
            if isinstance(value, dict) and set(value) == {"b64"}:
                value = base64.b64decode(value["b64"])
            inputs.setdefault(name, []).append(value)
    return inputs
