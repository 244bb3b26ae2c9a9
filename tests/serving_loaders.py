"""The loaders a serving export must answer under: TF2 objects, and TensorFlow Serving's session path.

TensorFlow Serving loads a SavedModel with the C++ `LoadSavedModel`: import the
MetaGraph into a session, restore the variables through the saver, run the init
op. `tf.compat.v1.saved_model.loader.load` in a session takes the same path (as
does `saved_model_cli run`), so a test that passes here passes where the server
loads the model; `tf.saved_model.load` resolves variables another way and can
hide a failure (tensorflow/serving#2250).
"""

import numpy as np
import tensorflow as tf

LOADERS = ("tf2", "session")


class SessionSignature:
    """One signature of a SavedModel, loaded and run the way TensorFlow Serving does."""

    def __init__(self, export_dir, name):
        self._session = tf.compat.v1.Session(graph=tf.Graph())
        meta_graph = tf.compat.v1.saved_model.loader.load(
            self._session, [tf.saved_model.SERVING], export_dir)
        signature = meta_graph.signature_def[name]
        self.input_names = {key: value.name for key, value in signature.inputs.items()}
        self.output_names = {key: value.name for key, value in signature.outputs.items()}

    def __call__(self, **inputs):
        """Runs the signature on NumPy-convertible inputs; returns {output name: NumPy array}."""
        feed = {self.input_names[name]: value for name, value in inputs.items()}
        return self._session.run(self.output_names, feed)

    def close(self):
        self._session.close()


class ObjectSignature:
    """One signature of a SavedModel loaded with `tf.saved_model.load` (TF2 objects)."""

    def __init__(self, export_dir, name):
        self._function = tf.saved_model.load(export_dir).signatures[name]
        self.input_names = dict.fromkeys(self._function.structured_input_signature[1])
        self.output_names = dict.fromkeys(self._function.structured_outputs)

    def __call__(self, **inputs):
        outputs = self._function(**{name: tf.constant(value) for name, value in inputs.items()})
        return {name: value.numpy() for name, value in outputs.items()}

    def close(self):
        pass


def load_signature(export_dir, name, loader):
    """`name` of the SavedModel at `export_dir` through `loader` ('tf2' or 'session')."""
    return {"tf2": ObjectSignature, "session": SessionSignature}[loader](export_dir, name)


def assert_same_outputs(expected, actual, atol=1e-6):
    """Two {name: array} results hold the same outputs: numbers within `atol`, strings equal."""
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        value, other = np.asarray(value), np.asarray(actual[name])
        assert other.shape == value.shape, name
        if value.dtype.kind in "fc":
            np.testing.assert_allclose(other, value, rtol=0, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(other, value, err_msg=name)
