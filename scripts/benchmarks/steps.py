"""step_*_job_vs_loop, step_*_job_vs_py_function, step_memory_ratio, tf_step_job_vs_no_step: a user's
own per-image step (--image_step, issue 51) run by the job against the ways a user runs it without it.

On the light set, with the two Python steps of step_fns.py (~30-50 ms a photo on one core): G, a
pure-Python loop that holds the GIL, and R, a NumPy filter that releases it. Each repetition runs,
for G then R:
- (a) a sequential loop over the same files in one process, one TensorFlow thread: read, decode
  (`tf_serving_input.preprocessing.decode_for_steps`), the step, resize (`resize_stepped`): the
  job's own preprocessing functions, timed after a warm-up;
- (b) the tf.data guide's "after" with the step where users put it (pipelines.after_pipeline):
  CsvDataset -> map(decode) -> map(tf.py_function(step), AUTOTUNE) -> map(resize) -> batch ->
  map(normalize) -> prefetch, one full pass over the same files;
- (c) the real command line with --image_step and 2 workers, on N and memory_factor x N rows: its
  marginal images/s (start-up cancels) and its peak RSS (launcher + workers) at both sizes;
then (d): the job with a trivial TF step (step_fns.tf_identity) against the job without one, both
marginal over the whole light set and memory_factor times as many rows.
"""

import multiprocessing
import os
import time

from benchmarks.data import write_csv
from benchmarks.harness import epoch_times, in_turn, marginal_rate, median, settle
from benchmarks.job import run_job, steady_seconds_per_image
from benchmarks.pipelines import after_pipeline

STEP_FNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "step_fns.py")
PYTHON_STEPS = {"G": ("gil", "gil_equalize", "pure Python, GIL-bound"),
                "R": ("numpy", "numpy_blur", "NumPy, releases the GIL")}
TF_STEP = "tf_identity"
WORKERS = 2  # The comparison: the job on 2 worker processes against one core's loop.
BATCH = 16  # Small batches: a pass over a few hundred ~40 ms images is a few dozen batches.
WARM_UP = 3  # Images the sequential loop runs untimed first (TensorFlow's tracing, first calls).
_LOOP = {}


def spec(function):
    """The --image_step spec of one of step_fns.py's functions."""
    return f"{STEP_FNS}:{function}"


def load_step(function):
    """A step_fns.py function loaded the way the job loads a spec (tf_serving_input.steps)."""
    from tf_serving_input import steps as image_steps

    _, fn = image_steps.resolve(spec(function), 0, check_trace=False)
    return fn


def sequential_loop(paths, config_values, function, warm_up=WARM_UP):
    """(a) in this process: (images/s, step seconds per image) of one pass over `paths`.

    Each file is read, decoded, given to the step as NumPy and resized, with the job's own
    preprocessing functions; the first `warm_up` files are run untimed first.
    """
    import tensorflow as tf

    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import decode_for_steps, inspect_image, resize_stepped

    config = PreprocessConfig.from_dict(config_values)
    step = load_step(function)

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
    def decode(data):
        _, image_format, height_width = inspect_image(data, config.max_pixels)
        return decode_for_steps(data, image_format, height_width, config)

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)], autograph=False)
    def resize(image):
        return resize_stepped(image, config)

    def one(path):
        with open(path, "rb") as f:
            image = decode(f.read()).numpy()
        image.flags.writeable = False  # As the job passes it.
        started = time.perf_counter()
        out = step(image)
        stepped = time.perf_counter() - started
        resize(out).numpy()
        return stepped

    for path in paths[:warm_up]:
        one(path)
    started = time.perf_counter()
    step_seconds = sum(one(path) for path in paths)
    return len(paths) / (time.perf_counter() - started), step_seconds / len(paths)


def _loop_init():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)  # One core, as one of the job's workers.
    tf.config.threading.set_inter_op_parallelism_threads(1)


def sequential_rate(paths, config_values, function):
    """(a) in a fresh process with one TensorFlow thread: (images/s, step seconds per image)."""
    settle()
    with multiprocessing.get_context("spawn").Pool(1, initializer=_loop_init) as pool:
        return pool.apply(sequential_loop, (paths, config_values, function))


def py_function_rate(csv_path, function, batch=BATCH):
    """(b): images/s of one full pass of 'after' with the step in tf.py_function (a fresh pipeline)."""
    step = load_step(function)
    with open(csv_path, encoding="utf-8") as f:
        rows = sum(1 for _ in f) - 1  # Less the header.
    # The normalization's constants do not change its cost; the job's statistics are not needed.
    [seconds] = epoch_times(lambda: after_pipeline(csv_path, [127.5] * 3, [64.0] * 3, batch, step=step), 1)
    return rows / seconds


def measure(bench, image_set):
    """The step ratios on the first --step_images photos of `image_set` (the light set)."""
    results, work, factor = bench.results, bench.work, bench.args.memory_factor
    rows = min(bench.args.step_images, len(image_set.images))
    images = image_set.images[:rows]
    paths = [path for path, _ in images]
    csvs = {"small": write_csv(os.path.join(work, "steps.csv"), images),
            "many": write_csv(os.path.join(work, "steps_many.csv"), images, repeat_to=rows * factor)}
    tf_rows = len(image_set.images)
    tf_csvs = {"small": write_csv(os.path.join(work, "tf_step.csv"), image_set.images),
               "many": write_csv(os.path.join(work, "tf_step_many.csv"), image_set.images,
                                 repeat_to=tf_rows * factor)}
    workers = f"--direct_num_workers={WORKERS}"

    def job_pair(csv_pair, out, sizes, *extra):
        small = run_job(csv_pair["small"], os.path.join(work, out), workers, *extra)
        big = run_job(csv_pair["many"], os.path.join(work, f"{out}_many"), workers, *extra)
        for run in (small, big):
            failed = sum(len(status.get("failed", ())) for status in run.statuses)
            if failed:  # A step that fails rows would measure the failure path, not the step.
                raise RuntimeError(f"the job with {extra} failed {failed} rows under {work}/{out}")
        return small, big, marginal_rate((sizes[0], small.wall), (sizes[1], big.wall))

    steps = {}
    for key, (name, function, _) in PYTHON_STEPS.items():
        steps[f"{key} loop"] = lambda _, function=function: sequential_rate(paths, bench.config_values, function)
        steps[f"{key} py_function"] = lambda _, function=function: py_function_rate(csvs["small"], function)
        steps[f"{key} job"] = lambda _, name=name, function=function: job_pair(
            csvs, f"steps_{name}", (rows, rows * factor), "--image_step", spec(function))
    steps["no step"] = lambda _: job_pair(tf_csvs, "tf_step_none", (tf_rows, tf_rows * factor))
    steps["TF step"] = lambda _: job_pair(tf_csvs, "tf_step_identity", (tf_rows, tf_rows * factor),
                                          "--image_step", spec(TF_STEP))

    def log(repetition, sample):
        parts = []
        for key in PYTHON_STEPS:
            (loop, step_seconds), after, (small, big, job) = (sample[f"{key} loop"], sample[f"{key} py_function"],
                                                              sample[f"{key} job"])
            # The workers' in-DoFn rate, first shard of each left out: blind to start-up, not to other load.
            steady = WORKERS / steady_seconds_per_image(big.statuses)
            parts.append(f"{key}: loop {loop:.1f} img/s (step {step_seconds * 1000:.0f} ms), py_function "
                         f"{after:.1f}, job marginal {job:.1f} ({rows} rows {small.wall:.1f} s, "
                         f"{rows * factor} rows {big.wall:.1f} s; in its workers {steady:.1f})"
                         + (": NOT marginal, the larger run was not slower (start-up noise)"
                            if big.wall <= small.wall else ""))
        parts.append(f"no step {sample['no step'][2]:.0f} img/s, TF step {sample['TF step'][2]:.0f}")
        results.say(f"   [steps {repetition + 1}/{bench.repetitions}] " + "; ".join(parts))

    samples = in_turn(bench.repetitions, steps, log)
    results.say(f"9. [{image_set.title}] a Python step (--image_step, {WORKERS} workers, marginal {rows} vs "
                f"{rows * factor} rows) vs a sequential loop and vs tf.py_function in 'after'; a TF step vs none:")
    over_loop, over_after, titles = {}, {}, {}
    for key, (_, _, what) in PYTHON_STEPS.items():
        # Its rates (tens of images/s) stay in the log, off the throughput chart of thousands.
        loop = [rate for rate, _ in samples[f"{key} loop"]]
        after = samples[f"{key} py_function"]
        job = [rate for _, _, rate in samples[f"{key} job"]]
        step_ms = median([seconds for _, seconds in samples[f"{key} loop"]]) * 1000
        titles[key] = f"{image_set.title}; {key}: {what}, {step_ms:.0f} ms"
        over_loop[key], over_after[key] = [j / a for j, a in zip(job, loop)], [j / b for j, b in zip(job, after)]
    results.ratio("step_gil_job_vs_loop", titles["G"], over_loop["G"])
    results.ratio("step_numpy_job_vs_loop", titles["R"], over_loop["R"])
    results.ratio("step_gil_job_vs_py_function", titles["G"], over_after["G"])
    results.ratio("step_numpy_job_vs_py_function", titles["R"], over_after["R"])
    for key in PYTHON_STEPS:
        peaks = [(small.peak_rss, big.peak_rss) for small, big, _ in samples[f"{key} job"]]
        results.ratio("step_memory_ratio", f"{image_set.title}; {key}", [big / small for small, big in peaks],
                      note=f"peak RSS {median([s for s, _ in peaks]) / 2**30:.2f} GiB at {rows} rows, "
                           f"{median([b for _, b in peaks]) / 2**30:.2f} GiB at {rows * factor}")
    none, tf_step = [rate for _, _, rate in samples["no step"]], [rate for _, _, rate in samples["TF step"]]
    results.ratio("tf_step_job_vs_no_step", image_set.title, [s / n for s, n in zip(tf_step, none)],
                  note=f"marginal, {tf_rows} vs {tf_rows * factor} rows")
    return samples
