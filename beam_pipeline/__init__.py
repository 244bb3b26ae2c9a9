"""beam-image-pipeline: images -> sharded TFRecords, statistics, predictions, search, quality, UI.

    from beam_pipeline import python_step   # marks a Python --image_step (docs/steps.md)
    from beam_pipeline import batch_step    # marks a TF --image_step run on the resized batch (docs/steps.md)
"""

from tf_serving_input.steps import batch_step, python_step

__all__ = ["batch_step", "python_step"]
