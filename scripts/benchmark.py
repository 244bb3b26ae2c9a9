"""Side-by-side speed and memory measurements, as ratios against baselines measured in the same run.

    .venv/bin/python scripts/benchmark.py            # 2,000 heavy + 2,000 light JPEGs, 3 repetitions

Every ratio comes from interleaved repetitions (baseline, subject, baseline, subject, ...; 3 by
default) and is reported as its median and min-max, with whether the median meets its target.
The images are crops of real photographs (from the scikit-image and scikit-learn wheels, fetched
with pip the first time): a heavy set (~500x375, ~110 KiB, like ImageNet's validation photos) and
a light one ("everyday": crops, flips and rescales of sample_data's photos, ~500x375, ~35 KiB, q90).
Measures, in this order (one module of scripts/benchmarks/ each):
 1. job.py: the Beam job's marginal images/s (N and 10 N rows, so start-up cancels) against two
    bare multiprocessing loops on the same cores (loops.py): the same TensorFlow ops without
    Beam, and the fastest CPU peer, Pillow; the job's peak RSS at both sizes; on both sets;
 2. storage.py, reader.py: the reader's images/s of normalized batches, in evaluation mode and as
    training uses it (with and without its default augmentation), against plain tf.data over the
    same records and the tf.data guide's "before"/"after" pipelines and
    image_dataset_from_directory (pipelines.py); bytes per image and train/serve parity per format;
 3. end_to_end.py: the job + E epochs of the reader against E epochs of "after", E = 1 and 10;
 4. shrink.py: shrink-on-load JPEG decoding on 2.7 MP photos: speed-up and PSNR;
 5. stages.py: images/s per core of each stage (read, decode, resize, encode, write, statistics);
 6. predict.py: the predict job against model.predict (both marginal), the database load against a
    bare COPY, the predict job's memory;
 7. search.py: search latency p50/p99 and recall@10 over 100,000 clustered vectors;
 8. ui.py: the web UI through HTTP: search-by-upload latency p50/p99, thumbnail p50, 50 concurrent
    overview requests all answered.
 9. steps.py: a user's own --image_step (issue 51): a GIL-bound and a NumPy Python step through the
    job on 2 workers against a sequential loop and tf.py_function in 'after'; a trivial TF step
    against none; the stepped job's peak RSS at two row counts (`--section steps` runs it alone).
10. columns.py: the job keeping five extra columns (a 200-character caption, 1-4 labels, a float, an
    int, 1-3 boxes) against the job keeping none, on the light set (`--section columns` runs it alone).
11. engines.py (`--section engines` only: it needs Java 17, Maven and standing clusters, which it starts
    and stops): the job's marginal images/s on each engine of docs/runners.md (local, portable runner,
    Flink embedded and standing cluster, Spark standing cluster) against the local runner's.
It prints the ratio table, writes docs/benchmarks.md, docs/benchmark_throughput.png and the table
between README.md's benchmark-table markers (harness.py: timing and repetitions; report.py).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(SCRIPTS), SCRIPTS]  # The repository's modules, then the benchmarks package.

from benchmarks.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
