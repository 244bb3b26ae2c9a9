"""A run with a Python step (`@python_step`): each image decoded in TF, the steps run, then resized in TF.

    rows = SteppedRows(config, codec, records, timeout=60.0)
    rows(datas)  # -> [(stored bytes, moments) or RowFailure], in order
    rows.times.take()  # each step's seconds an image since the last take (step_timing)
    rows.close()

The job's per-image TensorFlow call is split in three: decode (and orient) ->
the steps, in order (the Python steps in a child process of this worker,
`step_process.StepProcess`, never in a tf.data thread; a TF step as its own
traced call) -> resize, encode and moments. The same `preprocessing` functions
as the one-call path (`decode_for_steps`, `run_tf_steps`, `resize_stepped`).
Rows go one at a time: decoded images differ in size, and a Python step costs
far more than a call. A run without a Python step never comes here. No Beam.

`timeout` (--step_timeout) None runs the Python steps in this process: no
timeout, no guard against a step that ends the process, its prints sent to
stderr; what a step does to the process it runs in is then the worker's fate.
"""

import contextlib
import logging
import sys
import time

from beam_pipeline.preprocess import step_process, step_timing
from tf_serving_input import failures
from tf_serving_input import steps as image_steps

_LOG = logging.getLogger(__name__)


class SteppedRows:
    """File contents -> (stored bytes, moments) or RowFailure, through steps of which at least one is Python."""

    def __init__(self, config, codec, records, batch_steps=(), timeout=None, in_child=True):
        """`batch_steps`: the traced `@batch_step`s, (name, function), run on each resized image as a batch of 1.
        `timeout`: seconds a Python step may take on one image (None: no limit). `in_child`: run the Python
        steps in a child process (`step_process`; needed for a timeout); False runs them here."""
        import tensorflow as tf

        from tf_serving_input.codecs import to_bytes
        from tf_serving_input.normalization import pixel_moments
        from tf_serving_input.preprocessing import inspect_and_decode_for_steps, resize_stepped

        self._to_bytes = to_bytes
        self._op_error = tf.errors.OpError
        self._timeout = timeout
        self._steps = []  # (name, kind, position in the run, callable or the child's position of the Python step)
        python_records = [record for record in records if record.kind == image_steps.PYTHON]
        self._max_pixels = config.max_pixels
        self._process = (step_process.StepProcess(python_records, timeout, config.max_pixels) if in_child
                         else None)
        for record in records:
            if record.kind == image_steps.TF:
                call = image_steps.tf_step_call(image_steps.load(record), record)
            elif self._process is not None:
                call = python_records.index(record)
            else:
                try:
                    call = image_steps.python_caller(record, image_steps.load(record))
                except RuntimeError as error:  # Its set-up failed: the run's one line names it (as in a child).
                    raise step_process.StepCrashed(f"{step_process.CRASH_MARK} {error}") from error
            self._steps.append((record.name, record.kind, record.position, call))
        self.times = step_timing.StepTimes(len(self._steps))
        if self._process is not None:
            self._process.start()  # The set-up runs now, once for this worker (again after a timeout).

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
        def decode(data):
            return inspect_and_decode_for_steps(data, config)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)], autograph=False)
        def finish(image):
            resized = image_steps.run_batch_steps(resize_stepped(image, config)[None], batch_steps)[0]
            return codec.encode(resized, config), pixel_moments(resized[None])

        self._decode, self._finish = decode.get_concrete_function(), finish.get_concrete_function()
        self._batch_names = " then ".join(name for name, _ in batch_steps)

    def __call__(self, datas):
        return [self._one(data) for data in datas]

    def _one(self, data):
        try:
            image, problem, detail = self._decode(data)
        except self._op_error as error:
            return failures.describe_decode_failure(data, error)
        if int(problem):
            return failures.RowFailure(failures.PROBLEMS[int(problem)], detail.numpy().decode("utf-8"))
        for name, kind, position, call in self._steps:
            started = time.perf_counter()
            if kind == image_steps.TF:
                outcome = self._tf_step(name, call, image)
                self.times.add(position, time.perf_counter() - started)
            else:
                outcome = self._python_step(name, position, call, image)
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

    def _python_step(self, name, position, call, image):
        pixels = image.numpy() if hasattr(image, "numpy") else image
        if self._process is None:
            pixels.flags.writeable = False  # The step gets a view it may not change in place; it returns its own.
            # Its prints go to stderr (the run's log during a run), never to the command's stdout.
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    outcome = step_process.run_step(name, call, pixels, self._max_pixels)
            except SystemExit as exiting:  # It would end this worker: the run ends, naming the step.
                raise step_process.StepCrashed(f"{step_process.CRASH_MARK} --image_step {name} called sys.exit"
                                               f"({exiting.code!r}) on an image") from None
        else:
            outcome = self._process.call(call, pixels)
        self.times.add(position, outcome.seconds)
        if isinstance(outcome, step_process.TimedOut):
            _LOG.warning("--image_step %s ran past --step_timeout %g s on an image: stopped", name, self._timeout)
            return failures.RowFailure(failures.STEP_TIMEOUT, f"{name}: still running after --step_timeout "
                                       f"{self._timeout:g} s; stopped (its process replaced)")
        if isinstance(outcome, step_process.Raised):
            # The traceback goes to the run's log (the launcher keeps the workers' warnings there).
            _LOG.warning("--image_step %s raised:\n%s", name, outcome.traceback)
            return failures.RowFailure(failures.STEP_FAILED, outcome.line)
        if isinstance(outcome, step_process.BadOutput):
            return failures.RowFailure(failures.STEP_BAD_OUTPUT, outcome.problem)
        return outcome.image

    def close(self):
        """Ends the Python steps' child process (if any)."""
        if self._process is not None:
            self._process.close()
