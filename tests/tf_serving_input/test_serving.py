"""The serving export (in process): signatures, outputs and embeddings under every TensorFlow loader.

Every export is loaded with `tf.saved_model.load` and with the session loader
TensorFlow Serving uses (`serving_loaders`), and one is run with `saved_model_cli`.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import imaging
import outputs
import serving_loaders
from tf_serving_input import export_serving_model, failures
from tf_serving_input.normalization import read_statistics
from tf_serving_input.serving import rest_instances_to_inputs, rest_request_body

SIZE = 16


def classifier(num_classes):
    return keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                             keras.layers.GlobalAveragePooling2D(),
                             keras.layers.Dense(num_classes, activation="softmax")])


@pytest.fixture(scope="module")
def classifier_export(tiny_job, tmp_path_factory):
    """A small classifier exported on the tiny job's output: (export_dir, vocabulary)."""
    out, _, _ = tiny_job
    vocabulary = read_statistics(out)[2]
    keras.utils.set_random_seed(1)
    export_dir = str(tmp_path_factory.mktemp("classifier") / "export")
    return export_serving_model(classifier(len(vocabulary)), out, export_dir), vocabulary


@pytest.mark.parametrize("loader", serving_loaders.LOADERS)
def test_export_signatures_inputs_and_outputs(tiny_job, classifier_export, loader):
    out, folder, _ = tiny_job
    export_dir, vocabulary = classifier_export
    serve = serving_loaders.load_signature(export_dir, "serving_default", loader)
    assert list(serve.input_names) == ["image_bytes"]
    result = serve(image_bytes=[(folder / "img1.png").read_bytes(), (folder / "img2.jpg").read_bytes()])
    assert set(result) == {"scores", "class_ids", "classes", "embedding"}
    assert result["scores"].shape == (2, len(vocabulary))
    assert result["embedding"].shape == (2, 4) and result["embedding"].dtype == np.float32  # Conv2D(4) pooled.
    assert [vocabulary[i].encode() for i in result["class_ids"]] == result["classes"].tolist()

    record = next(iter(tf.data.TFRecordDataset(outputs.shard_paths(out, "train")[0]))).numpy()
    by_example = serving_loaders.load_signature(export_dir, "serving_examples", loader)(examples=[record])
    assert set(by_example) == set(result) and by_example["scores"].shape == (1, len(vocabulary))

    with pytest.raises(tf.errors.InvalidArgumentError, match="not_an_image"):
        serve(image_bytes=[b"this is not an image"])
    # A JPEG whose scan ends early (libjpeg would decode it grey) is refused as the job refuses it.
    good = imaging.encode(imaging.quadrants(120, 160), "JPEG", quality=90)
    cut = imaging.cut_jpeg(good, len(good) // 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="truncated: JPEG scan data ends") as caught:
        serve(image_bytes=[cut])
    assert failures.from_serving_error(cut, caught.value).reason == failures.TRUNCATED
    serve.close()


@pytest.mark.slow  # `saved_model_cli` is a fresh interpreter importing TensorFlow: the full suite's alone.
def test_every_loader_answers_the_same(tiny_job, classifier_export, tmp_path):
    """tf.saved_model.load, the session loader TF Serving uses, and `saved_model_cli run` agree."""
    _, folder, _ = tiny_job
    export_dir, _ = classifier_export
    images = [(folder / name).read_bytes() for name in ("img1.png", "img2.jpg", "img4.jpg")]
    results = {loader: serving_loaders.load_signature(export_dir, "serving_default", loader)(image_bytes=images)
               for loader in serving_loaders.LOADERS}
    serving_loaders.assert_same_outputs(results["tf2"], results["session"])

    request = tmp_path / "request.npy"
    np.save(request, np.array(images, dtype=object))
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    ran = subprocess.run([cli, "run", "--dir", export_dir, "--tag_set", "serve", "--signature_def",
                          "serving_default", "--inputs", f"image_bytes={request}", "--outdir", str(tmp_path / "cli")],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    from_cli = {path.stem: np.load(path, allow_pickle=True) for path in (tmp_path / "cli").glob("*.npy")}
    serving_loaders.assert_same_outputs(results["tf2"], from_cli)


def test_rest_body_feeds_the_session_loaded_signature(tiny_job, classifier_export):
    """The REST body scripts/train.py writes has the input names and shapes TF Serving expects."""
    _, folder, _ = tiny_job
    export_dir, vocabulary = classifier_export
    paths = [folder / "img3.png", folder / "img0.jpg"]
    body = json.loads(json.dumps(rest_request_body(paths)))  # What goes over the wire.
    serve = serving_loaders.load_signature(export_dir, body["signature_name"], "session")
    inputs = rest_instances_to_inputs(body)
    assert sorted(inputs) == sorted(serve.input_names) and inputs["image_bytes"][0] == paths[0].read_bytes()
    assert serve(**inputs)["scores"].shape == (2, len(vocabulary))


@pytest.mark.slow  # Three exports of a model (~13 s of the everyday lane): the full suite's.
def test_embedding_from_a_named_layer_or_none(tiny_job, tmp_path):
    out, folder, _ = tiny_job
    model = classifier(3)
    image = [(folder / "img1.png").read_bytes()]
    named = export_serving_model(model, out, str(tmp_path / "named"), embedding_layer=model.layers[0].name)
    result = serving_loaders.load_signature(named, "serving_default", "session")(image_bytes=image)
    assert result["embedding"].shape == (1, (SIZE - 2) * (SIZE - 2) * 4)  # The Conv2D map, flattened.
    bare = export_serving_model(model, out, str(tmp_path / "bare"), embedding_layer=False)
    result = serving_loaders.load_signature(bare, "serving_default", "session")(image_bytes=image)
    assert "embedding" not in result and result["scores"].shape == (1, 3)
    with pytest.raises(ValueError, match="no_such_layer"):
        export_serving_model(model, out, str(tmp_path / "bad"), embedding_layer="no_such_layer")
