"""RunInference on exports of `export_serving_model`: the model handler and what travels with each image.

    RunInference(KeyedModelHandler(ExportModelHandler(...)).with_no_batching())

Batches are formed before RunInference, per output shard and in row order
(`prediction_pipeline.read_*_batches`), not by Beam's BatchElements: a
model's numbers can depend on which images share a batch, and batches that
depend only on the input keep the output byte-identical whatever the worker
count or the runner's bundling. Each element is therefore one batch of
(RowRef, example) pairs; an example is the bytes the signature takes, or a
`RowFailure` (the file could not be read), or `EMPTY_SHARD`, which pass
through the handler untouched so that every row reaches the shard writer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from beam_pipeline.predict import vectors
from tf_serving_input import failures


@dataclasses.dataclass(frozen=True)
class RowRef:
    """One image on its way through RunInference (its key): where it comes from and goes to.

    Attributes:
      shard: the output shard's name (e.g. 'train-00000-of-00008').
      index: the row's position in that shard; -1 for the marker of an empty shard.
      total: how many rows the shard holds.
      key, source, path, split, label: the row's stable key, the path as written in the CSV,
        that path resolved, its split and label.
      line: the CSV line (0 when the row comes from the job's records).
      labels: a multi-label row's labels (`label` is then '').
      columns: the job's kept columns of the row, as the predictions' JSON cell (`common/kept_columns.py`).
    """

    shard: str
    index: int
    total: int
    key: str = ""
    source: str = ""
    path: str = ""
    split: str = ""
    label: str = ""
    line: int = 0
    labels: tuple[str, ...] = ()
    columns: str = "{}"


class _EmptyShard:
    """The example of a shard with no rows: it passes through so that the shard's file is written."""

    def __reduce__(self) -> tuple[Callable[[], _EmptyShard], tuple[()]]:
        return (_empty_shard, ())


def _empty_shard() -> _EmptyShard:
    return EMPTY_SHARD


EMPTY_SHARD = _EmptyShard()

# What the handler is given per row: the bytes the signature takes, or what passes through untouched.
Example = bytes | failures.RowFailure | _EmptyShard


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One image's post-processed model outputs."""

    top_ids: np.ndarray
    top_scores: np.ndarray
    embedding: np.ndarray | None  # Unit length, in the chosen dtype; None when the export has no embedding.


class _LoadedExport:
    """A loaded SavedModel and one of its signatures, called on a list of bytes (picklable results)."""

    def __init__(self, model_dir: str, signature: str, input_name: str) -> None:
        import tensorflow as tf

        self._loaded = tf.saved_model.load(model_dir)  # Keeps the signature's variables alive.
        self._function = self._loaded.signatures[signature]
        self._input_name = input_name
        self._tf = tf

    def __call__(self, datas: list[bytes]) -> dict[str, np.ndarray]:
        outputs = self._function(**{self._input_name: self._tf.constant(datas, self._tf.string)})
        return {name: value.numpy() for name, value in outputs.items()}


class ExportModelHandler(ModelHandler[Example, PredictionResult, _LoadedExport]):
    """Runs one signature of a serving export on prepared batches and post-processes the outputs.

    One model copy per worker process by default; `large_model=True` shares one copy per machine
    (Beam runs it in a process of its own and the workers call it).
    """

    def __init__(self, model_dir: str, signature: str, input_name: str, top_k: int, embedding_dtype: str = "float32",
                 large_model: bool = False) -> None:
        super().__init__(large_model=large_model)
        self._model_dir = model_dir
        self._signature = signature
        self._input_name = input_name
        self._top_k = top_k
        self._embedding_dtype = embedding_dtype

    def load_model(self) -> _LoadedExport:
        from beam_pipeline.common.fast_exit import skip_final_collection
        from beam_pipeline.common.runners import configure_tensorflow_threads

        configure_tensorflow_threads()
        skip_final_collection()
        return _LoadedExport(self._model_dir, self._signature, self._input_name)

    def run_inference(self, batch: Sequence[Example], model: _LoadedExport,
                      inference_args: dict[str, Any] | None = None) -> list[PredictionResult]:
        datas = [example for example in batch if isinstance(example, bytes)]
        outcomes = iter(self._predict(datas, model))
        return [PredictionResult(None, next(outcomes) if isinstance(example, bytes) else example)
                for example in batch]

    def _predict(self, datas: list[bytes], model: _LoadedExport) -> Sequence[Prediction | failures.RowFailure]:
        """[Prediction or RowFailure] for the inputs, in order; a batch that fails is redone one by one."""
        if not datas:
            return []
        import tensorflow as tf

        try:
            return self._post(model(datas))
        except tf.errors.InvalidArgumentError:
            pass  # Some image cannot be decoded: find which, and why.
        outcomes: list[Prediction | failures.RowFailure] = []
        for data in datas:
            try:
                outcomes += self._post(model([data]))
            except tf.errors.InvalidArgumentError as error:
                outcomes.append(failures.from_serving_error(data, error))
        return outcomes

    def _post(self, outputs: dict[str, np.ndarray]) -> list[Prediction]:
        ids, scores, embeddings = vectors.postprocess(outputs["scores"], outputs.get("embedding"), self._top_k,
                                                      self._embedding_dtype)
        return [Prediction(ids[i], scores[i], None if embeddings is None else embeddings[i]) for i in range(len(ids))]

    def get_num_bytes(self, batch: Sequence[Example]) -> int:
        return sum(len(example) for example in batch if isinstance(example, bytes))

    def get_metrics_namespace(self) -> str:
        return "beam_image_pipeline_predict"
