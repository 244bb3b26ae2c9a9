"""Rows -> outcomes: read each row's file, preprocess it in TensorFlow, build its record. No Beam.

    preprocessor = RowPreprocessor(config)
    for row, outcome in preprocessor(rows):    # in row order
        ...  # outcome: Written(record, moments) or a failures.RowFailure

Rows go through TensorFlow `ROWS_PER_CALL` at a time: each call costs ~0.3 ms
of Python and dispatch on top of ~3 ms of work per image. The preprocessing
checks every image before decoding it (`preprocessing.inspect_image`) and
returns what it found as numbers, so a bad header or an unsupported format
fails only its row. A decode op that fails on bad data fails the whole call;
the call is then redone one row at a time to tell which row, and why.
"""

import dataclasses
import threading

import numpy as np

from beam_pipeline.inputs.rows import DEFAULT_MAX_FILE_BYTES, failure_of, read_image_bytes
from tf_serving_input import failures
from tf_serving_input.columns import FeatureSpec

# Rows per TensorFlow call (8 measured 2.5-2.6 vs 2.8-3.4 ms per image for 1), and the most
# file bytes one call holds.
ROWS_PER_CALL = 8
BYTES_PER_CALL = 32 * 1024 * 1024

# The traced graph of a configuration without steps, kept for the process: a worker process makes a
# RowPreprocessor per DoFn instance (and a process running jobs in memory, one per job), and each
# trace plus its first call's graph optimization cost ~5 s of CPU (measured: 14 s of a 1-image run).
_TRACED: dict = {}
_TRACED_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Written:
    """A row whose image was preprocessed: its serialized tf.train.Example and exact pixel moments."""

    record: bytes
    moments: np.ndarray


class RowPreprocessor:
    """Turns Rows into (row, Written | RowFailure), in order, never raising for a bad row."""

    def __init__(self, config, max_file_bytes=DEFAULT_MAX_FILE_BYTES, read_file=read_image_bytes,
                 rows_per_call=ROWS_PER_CALL, steps=(), step_timeout=None, features=None):
        """`steps`: the run's --image_step records (`tf_serving_input.steps.StepRecord`), loaded here, each
        from its recorded file and only when its SHA-256 matches. `@batch_step`s (last) run on each call's
        resized batch. `step_timeout`: --step_timeout's seconds (None: its default; 0: the Python steps run
        in this process, with no timeout). `features`: the run's kept columns (`FeatureSpec`; None: none), written
        in each record with the row's values (`Row.columns`, and `Row.labels` in a multi-label run)."""
        import tensorflow as tf

        from beam_pipeline.common.records import example_bytes
        from tf_serving_input import steps as image_steps
        from tf_serving_input.codecs import codec_for, to_bytes
        from tf_serving_input.normalization import pixel_moments
        from tf_serving_input.preprocessing import (
            inspect_image,
            preprocess_checked_image,
            preprocess_stepped_image,
            problem_detail,
        )

        self._config = config
        self._max_file_bytes = max_file_bytes
        self._read_file = read_file
        self._rows_per_call = rows_per_call
        self._codec = codec_for(config)
        self._to_bytes = to_bytes
        self._example_bytes = example_bytes
        self._features = features if features is not None else FeatureSpec()
        self._op_error = tf.errors.OpError
        size = config.image_size
        failed_image = tf.zeros([size, size, 3], tf.uint8)
        image_spec = tf.TensorSpec([size, size, 3], tf.uint8)
        stores_pixels = self._codec.stores_pixels
        # The batch steps run on the resized batch, after map_fn: each call's images are then encoded after them.
        batch_steps = [(record.name, image_steps.trace_batch(image_steps.load(record), record, size))
                       for record in steps if record.kind == image_steps.BATCH]
        steps = tuple(record for record in steps if record.kind != image_steps.BATCH)
        encode_each = not stores_pixels and not batch_steps
        # Raw storage stores the images themselves: map_fn stacks them once, not twice.
        outputs = ((image_spec, self._codec.encoded_spec(size)) if encode_each else (image_spec,)) + (
            tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.string))

        # A Python step splits the call in three (decode -> steps -> resize): python_steps.SteppedRows.
        self._stepped_rows = None
        if any(record.kind == image_steps.PYTHON for record in steps):
            from beam_pipeline.preprocess.python_steps import SteppedRows
            from beam_pipeline.preprocess.step_process import DEFAULT_TIMEOUT

            timeout = DEFAULT_TIMEOUT if step_timeout is None else step_timeout
            self._stepped_rows = SteppedRows(config, self._codec, steps, batch_steps, timeout=timeout or None,
                                             in_child=bool(timeout))
            steps, batch_steps = (), []
        # The TF steps, traced once each; a bad output is one more problem index past failures.PROBLEMS.
        self._steps = [(record.name, image_steps.trace(image_steps.load(record), record)) for record in steps]
        self._batch_steps = batch_steps
        self._reasons = failures.PROBLEMS + (failures.STEP_BAD_OUTPUT,)
        self._prefixes = {}  # The first k steps only, traced to tell which step raised (or the decode).

        def build(tf_steps, batch=()):
            # autograph=False: the graph below is explicit tf.cond / map_fn (steps keep theirs: steps.trace).
            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
            def preprocess(datas):
                return preprocess_all(datas, tf_steps, batch)

            # Called as its concrete function, on a string tensor: ~90 us a call less than through
            # tf.function's argument binding (~180 us a call in all, one call every ROWS_PER_CALL rows).
            concrete = preprocess.get_concrete_function()
            return lambda datas: concrete(tf.constant(datas, tf.string))

        def stepped(data, image_format, height_width, problem, tf_steps):
            if not tf_steps:
                image = tf.cond(tf.equal(problem, 0),
                                lambda: preprocess_checked_image(data, image_format, height_width, config),
                                lambda: failed_image)
                return image, problem, None  # No step: no detail of its own (the graph as before steps).
            image, bad, detail = tf.cond(
                tf.equal(problem, 0),
                lambda: preprocess_stepped_image(data, image_format, height_width, config, tf_steps),
                lambda: (failed_image, tf.constant(False), tf.constant("")))
            return image, tf.where(bad, len(failures.PROBLEMS), problem), detail

        def preprocess_all(datas, tf_steps, batch):
            def one(data):
                problem, image_format, height_width = inspect_image(data, config.max_pixels)
                image, problem, step_detail = stepped(data, image_format, height_width, problem, tf_steps)
                # Formatting the detail costs ~0.1 ms an image: only rows that failed pay for it.
                def failed_detail():
                    def found():
                        return problem_detail(problem, image_format, height_width, config.max_pixels)

                    # With steps, a problem past failures.PROBLEMS is a step's bad output, with its own detail.
                    return tf.cond(problem < len(failures.PROBLEMS), found, lambda: step_detail) if tf_steps \
                        else found()

                detail = tf.cond(tf.equal(problem, 0), lambda: tf.constant(""), failed_detail)
                encoded = (self._codec.encode(image, config),) if encode_each else ()
                return (image, *encoded, problem, detail)

            # parallel_iterations=1: one decoded source image (up to max_pixels) alive at a time.
            images, *rest = tf.map_fn(one, datas, fn_output_signature=outputs, parallel_iterations=1)
            if batch:  # The rows that failed are black images in the batch; their outputs are dropped.
                images = image_steps.run_batch_steps(images, batch)
            if batch and not stores_pixels:
                rest.insert(0, tf.map_fn(lambda image: self._codec.encode(image, config), images,
                                         fn_output_signature=self._codec.encoded_spec(size)))
            encoded = images if stores_pixels else rest.pop(0)
            return (encoded, pixel_moments(images), *rest)  # Moments of the whole batch in one go.

        self._build = build
        if self._stepped_rows is not None:
            self._preprocess = None
        elif self._steps or self._batch_steps:
            self._preprocess = build(self._steps, self._batch_steps)
        else:  # The graph depends on the configuration alone (the codec comes from it).
            with _TRACED_LOCK:
                if config not in _TRACED:
                    _TRACED[config] = build((), ())
                self._preprocess = _TRACED[config]

    def take_step_times(self):
        """Each step's times an image since the last take (a shard status's `step_times`), or None when the
        steps are not timed (no step, or TF steps only: fused into one call)."""
        return self._stepped_rows.times.take() if self._stepped_rows is not None else None

    def close(self):
        """Ends the Python steps' child process, if any."""
        if self._stepped_rows is not None:
            self._stepped_rows.close()

    def __call__(self, rows):
        """Yields (row, Written or RowFailure) for every row, in order, reading each row's file here.

        Streams: at most `rows_per_call` files (BYTES_PER_CALL bytes) wait for a
        call, plus the file just read.
        """
        return self._preprocess_reads((row, self._read(row)) for row in rows)

    def _read(self, row):
        failure = failure_of(row)
        if failure is not None:
            return failure  # A bad cell: the image is not read.
        try:
            return self._read_file(row.path, self._max_file_bytes)
        except failures.RowFailure as failure:
            return failure

    def _preprocess_reads(self, reads):
        pending = []  # (row, file bytes or the RowFailure of reading it)
        files, file_bytes = 0, 0  # Of the pending rows, those read: they await one call.
        for row, item in reads:
            if isinstance(item, bytes):
                if files and (files >= self._rows_per_call or file_bytes + len(item) > BYTES_PER_CALL):
                    yield from self._flush(pending)
                    pending, files, file_bytes = [], 0, 0
                files, file_bytes = files + 1, file_bytes + len(item)
            pending.append((row, item))
        yield from self._flush(pending)

    def preprocess_batch(self, batch):
        """[(position, row, Written or RowFailure)] for one `RowReader` batch [(position, row, bytes or
        RowFailure)] (at most `ROWS_PER_CALL` rows and `BYTES_PER_CALL` bytes: one TensorFlow call)."""
        outcomes = self._flush([(row, item) for _, row, item in batch])
        return [(position, row, outcome) for (position, _, _), (row, outcome) in zip(batch, outcomes)]

    def _flush(self, pending):
        datas = [item for _, item in pending if isinstance(item, bytes)]
        outcomes = iter(self._preprocess_datas(datas))
        for row, item in pending:
            outcome = item if isinstance(item, failures.RowFailure) else next(outcomes)
            if isinstance(outcome, tuple):
                outcome = self._written(row, *outcome)
            yield row, outcome

    def _preprocess_datas(self, datas):
        """[(stored bytes, moments) or RowFailure] for file contents, in order."""
        if not datas:
            return []
        if self._stepped_rows is not None:
            return self._stepped_rows(datas)
        try:
            return self._results(datas, *self._preprocess(datas))
        except self._op_error:
            pass  # A decode op failed on some image: redo them one at a time to tell which, and why.
        outcomes = []
        for data in datas:
            try:
                outcomes += self._results([data], *self._preprocess([data]))
            except self._op_error as error:
                outcomes.append(self._step_failure(data, error) or failures.describe_decode_failure(data, error))
            except Exception as error:  # noqa: BLE001 - recorded as the row's failure, never raised.
                outcomes.append(failures.RowFailure(failures.UNEXPECTED, f"{type(error).__name__}: {error}"))
        return outcomes

    def _step_failure(self, data, error):
        """The step_failed RowFailure when the image decodes without the steps (so a step raised), else None."""
        every = self._steps + self._batch_steps  # The batch steps last, as they run.
        if not every:
            return None
        failing = None
        for count in range(len(every)):  # Without the steps, then with the first, the first two, ...
            if count not in self._prefixes:
                self._prefixes[count] = self._build(self._steps[:count],
                                                    self._batch_steps[:max(0, count - len(self._steps))])
            try:
                self._prefixes[count]([data])
            except self._op_error:
                failing = count - 1
                break
        if failing == -1:
            return None  # The decode itself failed: the image's own failure.
        name = every[len(every) - 1 if failing is None else failing][0]
        message = failures.op_error_message(error).encode("unicode_escape").decode("ascii")
        message = message if len(message) <= 200 else message[:197] + "..."
        return failures.RowFailure(failures.STEP_FAILED, f"{name}: {type(error).__name__}: {message}")

    def _results(self, datas, encoded, moments, problems, details):
        outcomes = []
        # np.asarray: a view of each result (.numpy() copies: up to ~0.4 ms an image with its page faults).
        for stored, row_moments, problem, detail in zip(np.asarray(encoded), np.asarray(moments), np.asarray(problems),
                                                        np.asarray(details)):
            if problem:
                outcomes.append(failures.RowFailure(self._reasons[problem], detail.decode("utf-8")))
            else:
                outcomes.append((self._to_bytes(stored), row_moments))
        return outcomes

    def _written(self, row, stored, moments):
        try:
            record = self._example_bytes(stored, self._codec, self._config.image_size, row.source, row.key, row.label,
                                         row.columns, row.labels, self._features)
            return Written(record, moments)
        except Exception as error:  # noqa: BLE001 - recorded as the row's failure, never raised.
            return failures.RowFailure(failures.UNEXPECTED, f"{type(error).__name__}: {error}")
