"""Training reader and serving signature for beam-image-pipeline outputs (no Beam needed).

    from tf_serving_input import make_dataset, export_serving_model
"""


def make_dataset(*args, **kwargs):
    """See `tf_serving_input.reader.make_dataset` (imported lazily: TF loads on first use)."""
    from tf_serving_input.reader import make_dataset as _make_dataset

    return _make_dataset(*args, **kwargs)


def export_serving_model(*args, **kwargs):
    """See `tf_serving_input.serving.export_serving_model`."""
    from tf_serving_input.serving import export_serving_model as _export

    return _export(*args, **kwargs)
