"""A query image's embedding, as the predict job stores embeddings: what search and the UI both ask.

    embedder = QueryEmbedder(model_dir)          # the export loaded once
    check_image_bytes(data, max_pixels)          # the job's checks, before any pixel is decoded
    vector = embedder.embed(data)                # unit length, through the export's serving_default

Refusals are the job's own reason codes (`failures.RowFailure`): bytes of no known
image format, a format that is not decoded, more pixels than the job allows (the
pixel-count bomb guard reads the header only), data a decoder refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tf_serving_input import failures, formats


class ExportError(ValueError):
    """The folder is no serving export that embeds (no serving_default, or no embedding output)."""


def check_image_bytes(data: bytes, max_pixels: int) -> None:
    """Raises RowFailure when `data` is no image the job would decode: empty, no known format, a bomb."""
    import tensorflow as tf

    from tf_serving_input.preprocessing import inspect_image, problem_detail

    if not data:
        raise failures.RowFailure(failures.EMPTY_FILE, "0 bytes")
    if formats.sniff(data) is None:  # Host-side first: text or HTML never reaches TensorFlow.
        raise failures.RowFailure(failures.NOT_AN_IMAGE, "no known image format")
    try:
        problem, image_format, height_width = inspect_image(data, max_pixels)
    except tf.errors.InvalidArgumentError as error:  # A header the shape op cannot read: cut short or damaged.
        raise failures.describe_decode_failure(data, error) from None
    reason = failures.PROBLEMS[int(problem)]
    if reason is not None:
        detail = problem_detail(problem, image_format, height_width, max_pixels).numpy().decode("utf-8", "replace")
        raise failures.RowFailure(reason, detail)


class StepsNeeded(ValueError):
    """The export takes images after the run's steps, and they were not named (or not as recorded): one line
    naming the step and the flag to pass. Refused like a bad flag (exit 2)."""


class QueryEmbedder:
    """An export's serving_default signature, loaded once, turning image bytes into stored-like embeddings.

    The export of a run with a Python step (`images_after_steps`) has no signature on raw bytes: the query is
    decoded, put through the run's steps in order and resized here, as the job did, then embedded through
    'serving_images'. Those steps are loaded only from `step_specs` (the user's --image_step) and only when
    each file's SHA-256 is the one the export records: never from what the export or a run folder names.
    A run whose steps are all TF has them in serving_default's graph: no --image_step then.

    Safe to call from several threads: a loaded concrete function holds no per-call state.
    """

    def __init__(self, model_dir: str, step_specs: Sequence[str] = ()) -> None:
        import tensorflow as tf

        self.model_dir = model_dir
        self._steps = self._named_steps(model_dir, step_specs)
        signature = "serving_default" if self._steps is None else "serving_images"
        try:
            self._serve = tf.saved_model.load(model_dir).signatures[signature]
        except (OSError, KeyError, ValueError, tf.errors.OpError) as error:
            raise ExportError(f"{model_dir} is not a serving export with a {signature} signature "
                              f"({type(error).__name__})") from None
        if "embedding" not in self._serve.structured_outputs:
            raise ExportError(f"{model_dir} has no embedding output (exported with embedding_layer=False)")
        self.size = int(self._serve.structured_outputs["embedding"].shape[-1])

    def embed(self, data: bytes) -> Any:
        """The unit-length float32 embedding of one image's bytes; RowFailure when the export refuses them."""
        import tensorflow as tf

        from beam_pipeline.common.embeddings import l2_normalize

        if self._steps is not None:
            return l2_normalize(self._serve(images=self._steps(data)[None])["embedding"].numpy())[0]
        try:
            outputs = self._serve(image_bytes=tf.constant([data]))
        except tf.errors.InvalidArgumentError as error:
            raise failures.from_serving_error(data, error) from None
        return l2_normalize(outputs["embedding"].numpy())[0]

    @staticmethod
    def _named_steps(model_dir: str, step_specs: Sequence[str]) -> Any:
        """The run's steps as `query_steps.QuerySteps` for an export that takes images after them, else None."""
        from tf_serving_input import steps
        from tf_serving_input.serving import read_export_info

        try:
            info = read_export_info(model_dir)
        except FileNotFoundError:
            info = None  # Not an export of ours: the signature's absence says so below.
        if info is None or not info.steps_outside:
            if step_specs:
                raise StepsNeeded(f"--image_step: {model_dir} holds the run's steps in its graph (or it has none): "
                                  "give no --image_step")
            return None
        if not step_specs:
            python = next(step for step in info.image_steps if step.kind == steps.PYTHON)
            raise StepsNeeded(f"{model_dir} takes images after the run's steps, and step {python.position + 1}, "
                              f"{python.spec}, is a Python step, which is loaded only when you name it: pass "
                              f"--image_step FILE.py:{python.name} for each of the run's "
                              f"{len(info.image_steps)} step(s), in order")
        try:
            loaded = steps.load_named(step_specs, info.image_steps, model_dir)
        except steps.StepRefused as error:
            raise StepsNeeded(str(error)) from None
        from beam_pipeline.common.query_steps import QuerySteps
        from tf_serving_input.features import PreprocessConfig

        return QuerySteps(PreprocessConfig.from_dict(info.preprocess), loaded)
