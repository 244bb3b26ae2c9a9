"""A run with a Python step (`@python_step`): each image decoded in TF, the steps run, then resized in TF.

    rows = SteppedRows(config, codec, records)
    rows(datas)  # -> [(stored bytes, moments) or RowFailure], in order

The job's per-image TensorFlow call is split in three: decode (and orient) ->
the steps, in order (a Python step on the NumPy array, in this worker
process, never in a tf.data thread; a TF step as its own traced call) ->
resize, encode and moments. The same `preprocessing` functions as the
one-call path (`decode_for_steps`, `run_tf_steps`, `resize_stepped`). Rows go
one at a time: decoded images differ in size, and a Python step costs far more
than a call. A run without a Python step never comes here. No Beam.
"""

import logging
import traceback

import numpy as np

from tf_serving_input import failures
from tf_serving_input import steps as image_steps

_LOG = logging.getLogger(__name__)


class SteppedRows:
    """File contents -> (stored bytes, moments) or RowFailure, through steps of which at least one is Python."""

    def __init__(self, config, codec, records, batch_steps=()):
        """`batch_steps`: the traced `@batch_step`s, (name, function), run on each resized image as a batch of 1."""
        import tensorflow as tf

        from tf_serving_input.codecs import to_bytes
        from tf_serving_input.normalization import pixel_moments
        from tf_serving_input.preprocessing import decode_for_steps, inspect_image, problem_detail, resize_stepped

        self._to_bytes = to_bytes
        self._op_error = tf.errors.OpError
        self._steps = []  # (name, kind, callable on a NumPy image or a traced TF call)
        for record in records:
            fn = image_steps.load(record)
            if record.kind == image_steps.PYTHON:
                self._steps.append((record.name, record.kind, image_steps.python_caller(record, fn)))
            else:
                self._steps.append((record.name, record.kind, self._tf_call(record, fn)))
        placeholder = tf.zeros([1, 1, 3], tf.uint8)

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
        def decode(data):
            problem, image_format, height_width = inspect_image(data, config.max_pixels)
            image = tf.cond(tf.equal(problem, 0), lambda: decode_for_steps(data, image_format, height_width, config),
                            lambda: placeholder)
            detail = tf.cond(tf.equal(problem, 0), lambda: tf.constant(""),
                             lambda: problem_detail(problem, image_format, height_width, config.max_pixels))
            return image, problem, detail

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)], autograph=False)
        def finish(image):
            resized = image_steps.run_batch_steps(resize_stepped(image, config)[None], batch_steps)[0]
            return codec.encode(resized, config), pixel_moments(resized[None])

        self._decode, self._finish = decode.get_concrete_function(), finish.get_concrete_function()
        self._batch_names = " then ".join(name for name, _ in batch_steps)

    @staticmethod
    def _tf_call(record, fn):
        import tensorflow as tf

        traced = image_steps.trace(fn, record)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)], autograph=False)
        def step(image):
            return image_steps.run_tf_steps(image, [(record.name, traced)])

        return step.get_concrete_function()

    def __call__(self, datas):
        return [self._one(data) for data in datas]

    def _one(self, data):
        try:
            image, problem, detail = self._decode(data)
        except self._op_error as error:
            return failures.describe_decode_failure(data, error)
        if int(problem):
            return failures.RowFailure(failures.PROBLEMS[int(problem)], detail.numpy().decode("utf-8"))
        for name, kind, call in self._steps:
            outcome = self._tf_step(name, call, image) if kind == image_steps.TF else self._python_step(name, call,
                                                                                                       image)
            if isinstance(outcome, failures.RowFailure):
                return outcome
            image = outcome
        try:
            encoded, moments = self._finish(image)
        except self._op_error as error:
            if not self._batch_names:
                raise  # Only a batch step fails here, as its row's failure (the resize cannot fail).
            return failures.RowFailure(failures.STEP_FAILED, f"{self._batch_names}: {image_steps.error_line(error)}")
        return self._to_bytes(encoded.numpy()), moments.numpy()[0]

    def _tf_step(self, name, call, image):
        try:
            image, bad, detail = call(image)
        except self._op_error as error:
            return failures.RowFailure(failures.STEP_FAILED, f"{name}: {image_steps.error_line(error)}")
        if bool(bad):
            return failures.RowFailure(failures.STEP_BAD_OUTPUT, detail.numpy().decode("utf-8"))
        return image

    def _python_step(self, name, call, image):
        pixels = image.numpy() if hasattr(image, "numpy") else image
        pixels.flags.writeable = False  # The step gets a view it may not change in place; it returns its own.
        try:
            out = call(pixels)
        except Exception as error:  # noqa: BLE001 - the step's failure is the row's, never the shard's.
            # The traceback goes to the run's log (the launcher keeps the workers' warnings there).
            _LOG.warning("--image_step %s raised:\n%s", name, "".join(traceback.format_exception(error)))
            return failures.RowFailure(failures.STEP_FAILED, f"{name}: {image_steps.error_line(error)}")
        problem = image_steps.python_output_problem(name, out)
        if problem is not None:
            return failures.RowFailure(failures.STEP_BAD_OUTPUT, problem)
        return np.ascontiguousarray(out)
