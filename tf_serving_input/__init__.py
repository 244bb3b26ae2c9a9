"""Training reader and serving signature for beam-image-pipeline outputs (no Beam needed).

    from tf_serving_input import make_dataset, export_serving_model, normalize_images, read_statistics, OutputLayout

`__all__` lists the public names; each is imported from its module when first used, so importing the package
loads no TensorFlow (the allocator setting below must come first) and `OutputLayout` none at all. The docs'
Python API page (docs/api.md) is generated from `__all__` (docs/hooks/reference.py).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Never at run time: TensorFlow must load after the allocator setting below. (What mypy sees of
    # the names `__getattr__` imports; ruff cannot read `__all__` built from a dict, hence the noqa.)
    from tf_serving_input.codecs import CODECS, StorageCodec, parse_record, parse_records  # noqa: F401
    from tf_serving_input.column_stats import load_column_stats  # noqa: F401
    from tf_serving_input.failures import REASONS, RowFailure  # noqa: F401
    from tf_serving_input.features import PreprocessConfig, load_preprocess_config  # noqa: F401
    from tf_serving_input.formats import sniff  # noqa: F401
    from tf_serving_input.layout import OutputLayout, PredictionLayout, QualityLayout  # noqa: F401
    from tf_serving_input.normalization import normalize_images, pixel_moments, preprocessing_fn, read_statistics  # noqa: F401
    from tf_serving_input.preprocessing import decode_image, preprocess_image, resize_image  # noqa: F401
    from tf_serving_input.reader import make_dataset  # noqa: F401
    from tf_serving_input.serving import (  # noqa: F401
        ExportInfo,
        export_serving_model,
        read_export_info,
        rest_instances_to_inputs,
        rest_request_body,
    )

# TensorFlow's default CPU allocator takes every large buffer fresh from the OS and returns it,
# so each batch pays page faults: writing one 64 x 224 x 224 x 3 float32 batch measured 18 ms that
# way and 2 ms with its BFC allocator, which keeps and reuses memory (the reader: ~3,000 -> ~7,000
# images/s on 2 cores). It is read when TensorFlow allocates its first tensor, so this takes effect
# when the package is imported before any tensor exists; TF_CPU_ALLOCATOR_USE_BFC=false opts out.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")



# Each public name: the module that defines it (in the order the API page shows them).
_MODULE_OF = {
    "make_dataset": "reader",
    "export_serving_model": "serving", "read_export_info": "serving", "ExportInfo": "serving",
    "rest_request_body": "serving", "rest_instances_to_inputs": "serving",
    "normalize_images": "normalization", "read_statistics": "normalization", "pixel_moments": "normalization",
    "preprocessing_fn": "normalization", "load_column_stats": "column_stats",
    "preprocess_image": "preprocessing", "decode_image": "preprocessing", "resize_image": "preprocessing",
    "PreprocessConfig": "features", "load_preprocess_config": "features",
    "OutputLayout": "layout", "PredictionLayout": "layout", "QualityLayout": "layout",
    "parse_record": "codecs", "parse_records": "codecs", "CODECS": "codecs", "StorageCodec": "codecs",
    "RowFailure": "failures", "REASONS": "failures",
    "sniff": "formats",
}
__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (PEP 562)."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # Found once: later lookups do not come here.
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
