"""What the JPEG scan check (preprocessing.scan_ends_early) costs the job, on the benchmark's light set.

    PYTHONPATH=$PWD:$PWD/scripts .venv/bin/python scripts/scan_check_cost.py [--images 300] [--repeats 15]

Times the job's TensorFlow call (RowPreprocessor: 8 rows a call, the default config) with the check and
with it taken out, each batch of 8 light-set photos (data.LIGHT, made under --work) alternately, and sums
the per-batch minimum (robust to other work on the machine). Prints the SHA-256 of both calls' outputs:
the check must not change the stored bytes of a good image.
"""

import argparse
import hashlib
import time

import numpy as np

from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
from benchmarks import data
from tf_serving_input import preprocessing
from tf_serving_input.features import PreprocessConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--work", default="/tmp/scan_check_cost")
    args = parser.parse_args()
    blobs = [open(path, "rb").read() for path, _ in
             data.make_images(args.work, data.sample_photos(), args.images, data.LIGHT)]
    config = PreprocessConfig()
    calls = {"with": RowPreprocessor(config)._preprocess}
    real = preprocessing._refuse_a_scan_cut_short
    preprocessing._refuse_a_scan_cut_short = lambda data, image: image  # Traced without the check.
    calls["without"] = RowPreprocessor(config)._preprocess
    preprocessing._refuse_a_scan_cut_short = real
    batches = [blobs[i:i + 8] for i in range(0, len(blobs), 8)]
    for name, call in calls.items():
        digest = hashlib.sha256()
        for batch in batches:
            for output in call(batch):
                array = np.asarray(output)
                digest.update(b"".join(array.ravel().tolist()) if array.dtype == object else array.tobytes())
        print(f"{name} the check: outputs' SHA-256 {digest.hexdigest()}")
    best = {name: np.full(len(batches), np.inf) for name in calls}
    for repeat in range(args.repeats):
        for index, batch in enumerate(batches):
            for name in ("with", "without") if (repeat + index) % 2 else ("without", "with"):
                start = time.perf_counter()
                calls[name](batch)
                best[name][index] = min(best[name][index], time.perf_counter() - start)
    per_image = {name: times.sum() / len(blobs) * 1e3 for name, times in best.items()}
    print(f"{len(blobs)} light photos, {args.repeats} repeats: with {per_image['with']:.3f} ms/image, without "
          f"{per_image['without']:.3f} ms/image, ratio {per_image['with'] / per_image['without']:.4f}")


if __name__ == "__main__":
    main()
