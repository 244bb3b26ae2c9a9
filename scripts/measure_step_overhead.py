"""What running a Python --image_step in its own process costs an image, against running it in the worker.

    PYTHONPATH=. .venv/bin/python scripts/measure_step_overhead.py [REPEATS]

A step that returns a copy of its input, on images of three sizes: the round trip through the step process
(`beam_pipeline.preprocess.step_process.StepProcess`: the image through the shared mapping, two small
messages) against the same call in this process (`--step_timeout 0`). Medians of interleaved repetitions;
no TensorFlow. docs/steps.md quotes the figures.
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

from beam_pipeline.preprocess import step_process
from tf_serving_input import steps

STEP = "from beam_pipeline import python_step\n\n\n@python_step\ndef same(image):\n    return image.copy()\n"
SHAPES = ((224, 224, 3), (375, 500, 3), (1080, 1440, 3))


def main(repeats=7):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "same.py")
        with open(path, "w") as f:
            f.write(STEP)
        record, fn = steps.resolve(f"{path}:same", 0)
        here = steps.python_caller(record, fn)
        process = step_process.StepProcess([record], timeout=step_process.DEFAULT_TIMEOUT)
        process.start()
        try:
            for shape in SHAPES:
                image = np.random.default_rng(0).integers(0, 255, shape, np.uint8)
                image.flags.writeable = False
                calls = 200 if image.nbytes < 2**20 else 50
                child, local = [], []
                for _ in range(repeats):
                    started = time.perf_counter()
                    for _ in range(calls):
                        process.call(0, image)
                    child.append((time.perf_counter() - started) / calls)
                    started = time.perf_counter()
                    for _ in range(calls):
                        step_process.run_step("same", here, image)
                    local.append((time.perf_counter() - started) / calls)
                in_child, in_worker = statistics.median(child) * 1e3, statistics.median(local) * 1e3
                print(f"{shape[1]} x {shape[0]}: step process {in_child:.3f} ms an image, in the worker "
                      f"{in_worker:.3f} ms: {in_child - in_worker:.3f} ms more")
        finally:
            process.close()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
