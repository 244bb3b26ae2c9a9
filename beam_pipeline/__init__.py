"""beam-image-pipeline: images -> sharded TFRecords, statistics, predictions, search, quality, UI.

    from beam_pipeline import python_step   # marks a Python --image_step (docs/steps.md)
"""

from tf_serving_input.steps import python_step

__all__ = ["python_step"]
