"""Training reader and serving signature for beam-image-pipeline outputs (no Beam needed).

    from tf_serving_input import make_dataset, export_serving_model
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Never at run time: TensorFlow must load after the allocator setting below.
    import tensorflow as tf

# TensorFlow's default CPU allocator takes every large buffer fresh from the OS and returns it,
# so each batch pays page faults: writing one 64 x 224 x 224 x 3 float32 batch measured 18 ms that
# way and 2 ms with its BFC allocator, which keeps and reuses memory (the reader: ~3,000 -> ~7,000
# images/s on 2 cores). It is read when TensorFlow allocates its first tensor, so this takes effect
# when the package is imported before any tensor exists; TF_CPU_ALLOCATOR_USE_BFC=false opts out.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")


def make_dataset(*args: Any, **kwargs: Any) -> tf.data.Dataset:
    """See `tf_serving_input.reader.make_dataset` (imported lazily: TF loads on first use)."""
    from tf_serving_input.reader import make_dataset as _make_dataset

    return _make_dataset(*args, **kwargs)


def export_serving_model(*args: Any, **kwargs: Any) -> str:
    """See `tf_serving_input.serving.export_serving_model`."""
    from tf_serving_input.serving import export_serving_model as _export

    return _export(*args, **kwargs)
