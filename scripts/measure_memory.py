"""Peak RSS of one large image, through the job's TensorFlow call or through the whole job (docs/performance.md#memory).

    .venv/bin/python scripts/measure_memory.py call IMAGE       # the job's call in this process
    .venv/bin/python scripts/measure_memory.py job IMAGE OUT    # the job on a one-row CSV (OUT-in/ holds it)

`call` prints this process's peak RSS after a warm-up image and after IMAGE; `job` runs the preprocess
command on the default runner and polls its processes with psutil (every 50 ms): the launcher, the
largest worker, and all of them together.
"""

from __future__ import annotations

import io
import os
import resource
import shutil
import subprocess
import sys
import time

GIB = 2**30


def measure_call(image: str) -> str:
    import numpy as np
    from PIL import Image

    from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
    from tf_serving_input.features import PreprocessConfig

    warm = io.BytesIO()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(warm, "PNG")
    preprocessor = RowPreprocessor(PreprocessConfig(image_size=224))
    preprocessor._preprocess_datas([warm.getvalue()])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open(image, "rb") as f:
        data = f.read()
    started = time.time()
    outcome = preprocessor._preprocess_datas([data])[0]
    took = time.time() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return (f"call {os.path.basename(image)}: {type(outcome).__name__}; peak RSS {before / GIB:.2f} GiB warm, "
            f"{after / GIB:.2f} GiB after the image (+{(after - before) / GIB:.2f} GiB), {took:.1f} s")


def measure_job(image: str, out: str) -> str:
    import psutil

    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out + "-in", exist_ok=True)
    csv = os.path.join(out + "-in", "in.csv")
    with open(csv, "w") as f:
        f.write(f"path,label\n{os.path.abspath(image)},a\n")
    process = subprocess.Popen([sys.executable, "-m", "beam_pipeline", "--input_csv", csv, "--output_dir", out,
                                "--image_size", "224", "--num_shards", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = psutil.Process(process.pid)
    launcher = largest = together = 0
    while process.poll() is None:
        try:
            sizes = []
            for each in [root, *root.children(recursive=True)]:
                try:
                    sizes.append(each.memory_info().rss)
                except psutil.Error:
                    sizes.append(0)
        except psutil.Error:
            break
        launcher, largest = max(launcher, sizes[0]), max(largest, max(sizes[1:], default=0))
        together = max(together, sum(sizes))
        time.sleep(0.05)
    stderr = process.stderr.read().decode() if process.stderr else ""
    return (f"job {os.path.basename(image)}: exit {process.returncode}; peak RSS launcher {launcher / GIB:.2f} GiB, "
            f"largest worker {largest / GIB:.2f} GiB, all processes {together / GIB:.2f} GiB"
            + ("" if process.returncode == 0 else f"\n{stderr[-2000:]}"))


def main(argv: list[str]) -> None:
    if len(argv) == 2 and argv[0] == "call":
        print(measure_call(argv[1]))
    elif len(argv) == 3 and argv[0] == "job":
        print(measure_job(argv[1], argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
