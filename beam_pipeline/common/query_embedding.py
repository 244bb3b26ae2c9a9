"""A query image's embedding, as the predict job stores embeddings: what search and the UI both ask.

    embedder = QueryEmbedder(model_dir)          # the export loaded once
    check_image_bytes(data, max_pixels)          # the job's checks, before any pixel is decoded
    vector = embedder.embed(data)                # unit length, through the export's serving_default

Refusals are the job's own reason codes (`failures.RowFailure`): bytes of no known
image format, a format that is not decoded, more pixels than the job allows (the
pixel-count bomb guard reads the header only), data a decoder refuses.
"""

from __future__ import annotations

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


class QueryEmbedder:
    """An export's serving_default signature, loaded once, turning image bytes into stored-like embeddings.

    Safe to call from several threads: a loaded concrete function holds no per-call state.
    """

    def __init__(self, model_dir: str) -> None:
        import tensorflow as tf

        self.model_dir = model_dir
        try:
            self._serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        except (OSError, KeyError, ValueError, tf.errors.OpError) as error:
            raise ExportError(f"{model_dir} is not a serving export with a serving_default signature "
                              f"({type(error).__name__})") from None
        if "embedding" not in self._serve.structured_outputs:
            raise ExportError(f"{model_dir} has no embedding output (exported with embedding_layer=False)")
        self.size = int(self._serve.structured_outputs["embedding"].shape[-1])

    def embed(self, data: bytes) -> Any:
        """The unit-length float32 embedding of one image's bytes; RowFailure when the export refuses them."""
        import tensorflow as tf

        from beam_pipeline.common.embeddings import l2_normalize

        try:
            outputs = self._serve(image_bytes=tf.constant([data]))
        except tf.errors.InvalidArgumentError as error:
            raise failures.from_serving_error(data, error) from None
        return l2_normalize(outputs["embedding"].numpy())[0]
