"""A query image put through a run's steps as the job put each image: decode -> the steps, in order -> resize.

    stepped = QuerySteps(config, steps.load_named(specs, recorded, where))
    image = stepped(data)  # uint8 [S, S, 3], or RowFailure (the job's reason codes)

For search and the UI's upload on an export that takes images after the steps (a run with a Python
step, `export_serving_model(..., images_after_steps=True)`). The same `preprocessing` functions as the
job's stepped rows (`decode_for_steps`, `run_tf_steps`, `resize_stepped`), in the same order; the steps
themselves come only from specs the user named (`steps.load_named`). One image at a time, in this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tf_serving_input import failures
from tf_serving_input import steps as image_steps


class QuerySteps:
    """Image bytes -> the uint8 [S, S, 3] image the job would store before encoding it; RowFailure otherwise."""

    def __init__(self, config: Any, loaded: Sequence[tuple[image_steps.StepRecord, Callable[..., Any]]]) -> None:
        import tensorflow as tf

        from tf_serving_input.preprocessing import inspect_and_decode_for_steps, resize_stepped

        self._max_pixels = config.max_pixels  # A step's output is bounded as the job bounds it.

        def decode(data: Any) -> Any:
            return inspect_and_decode_for_steps(data, config)

        def resize(image: Any) -> Any:
            return resize_stepped(image, config)

        image_spec = tf.TensorSpec([None, None, 3], tf.uint8)
        self._decode = tf.function(decode, input_signature=[tf.TensorSpec([], tf.string)],
                                   autograph=False).get_concrete_function()
        self._resize = tf.function(resize, input_signature=[image_spec], autograph=False).get_concrete_function()
        self._op_error = tf.errors.OpError
        self._steps: list[tuple[str, str, Callable[[Any], Any]]] = []
        # The `@batch_step`s run on the resized batch, after every per-image step (as in the job).
        self._batch = [(record.name, image_steps.trace_batch(fn, record, config.image_size))
                       for record, fn in loaded if record.kind == image_steps.BATCH]
        for record, fn in loaded:
            if record.kind == image_steps.BATCH:
                continue
            if record.kind == image_steps.PYTHON:
                self._steps.append((record.name, record.kind, image_steps.python_caller(record, fn)))
            else:
                self._steps.append((record.name, record.kind, image_steps.tf_step_call(fn, record)))

    def __call__(self, data: bytes) -> Any:
        import numpy as np

        try:
            image, problem, detail = self._decode(data)
        except self._op_error as error:
            raise failures.describe_decode_failure(data, error) from None
        reason = failures.PROBLEMS[int(problem)]
        if reason is not None:
            raise failures.RowFailure(reason, detail.numpy().decode("utf-8", "replace"))
        for name, kind, call in self._steps:
            if kind == image_steps.TF:
                try:
                    image, bad, detail = call(image)
                except self._op_error as error:
                    raise failures.RowFailure(failures.STEP_FAILED, f"{name}: {image_steps.error_line(error)}") \
                        from None
                if bool(bad):
                    raise failures.RowFailure(failures.STEP_BAD_OUTPUT, detail.numpy().decode("utf-8", "replace"))
                continue
            pixels = image.numpy() if hasattr(image, "numpy") else image
            pixels.flags.writeable = False  # As in the job: the step returns its own array.
            try:
                out = call(pixels)
            except Exception as error:  # noqa: BLE001 - the step's failure is the query's, one line.
                raise failures.RowFailure(failures.STEP_FAILED, f"{name}: {image_steps.error_line(error)}") from None
            problem_text = image_steps.python_output_problem(name, out, self._max_pixels)
            if problem_text is not None:
                raise failures.RowFailure(failures.STEP_BAD_OUTPUT, problem_text)
            image = np.ascontiguousarray(out)
        resized = self._resize(image)
        return image_steps.run_batch_steps(resized[None], self._batch)[0] if self._batch else resized
