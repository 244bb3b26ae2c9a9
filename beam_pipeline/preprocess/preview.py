"""`beam-image-pipeline preprocess ... --preview N`: the steps on the first N rows, in this process; no run.

    code = run_preview(job)   # prints each step's time per image and the rows that failed; writes the sheet

The images come from the job's own code (`RowPreprocessor`, the one TensorFlow
call the workers make, the steps loaded as the job loads them): 'before' is the
row without the steps, 'after' with them, each as the job would store it, and a
row that fails shows the reason and detail the job would record. The steps'
times are measured apart, each step alone on the images it gets in the job
(`decode_for_steps`, then each step, then `resize_stepped`; batch steps on the
resized batch), after one untimed call that pays for tracing. Nothing is written
to --output_dir; the contact sheet goes to --contact_sheet. No Beam pipeline.
"""

import itertools
import os
import statistics
import sys
import time

from beam_pipeline.common import terminal
from beam_pipeline.common.launcher import Refused
from tf_serving_input import failures

DEFAULT_SHEET = "preview.png"  # In the folder the command runs from, when --contact_sheet is not given.


def run_preview(job, contact_sheet=None):
    """Previews `job` (its `preview` first rows); returns the exit code (0, or 2 when refused)."""
    from beam_pipeline.common.launcher import InputRefused
    from beam_pipeline.inputs import rows as csv_rows
    from beam_pipeline.preprocess.cli import resolved_steps

    sheet = os.path.abspath(contact_sheet or DEFAULT_SHEET)
    try:
        if not sheet.lower().endswith(".png") or os.path.isdir(sheet):
            raise Refused(f"--contact_sheet {sheet} must name a .png file")
        if not os.path.isdir(os.path.dirname(sheet)):
            raise Refused(f"--contact_sheet {sheet}: the folder {os.path.dirname(sheet)} does not exist")
        job = resolved_steps(job) if job.steps else job
        job = job.with_typed_columns()
        rows = list(itertools.islice((row for row in csv_rows.iter_rows(job.input_csv, job.columns,
                                                                        job.column_reading)
                                      if csv_rows.is_kept(row)), job.preview))
    except (Refused, InputRefused) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: {job.input_csv} has no data rows to preview", file=sys.stderr)
        return 2
    from beam_pipeline.preprocess.step_process import StepCrashed, crash_line

    reads = {row.key: _read(row, job.max_file_bytes) for row in rows}
    try:
        # The Python steps run as in a worker: in a step process, under --step_timeout, timed there.
        after, python_times = _outcomes(job, rows, reads, job.steps)
        before, _ = _outcomes(job, rows, reads, ())
        timings = step_timings(job, [reads[row.key] for row in rows if isinstance(reads[row.key], bytes)],
                               python_times)
    except StepCrashed as crashed:  # A step that ended its process, or a set-up that failed or hung.
        print(f"error: {crash_line(str(crashed))}", file=sys.stderr)
        return 1
    render_preview(rows, before, after, job.preprocess, sheet)
    terminal.result(format_preview(job, rows, after, timings, sheet))
    return 0


def _read(row, max_file_bytes):
    from beam_pipeline.inputs.rows import read_image_bytes

    try:
        return read_image_bytes(row.path, max_file_bytes)
    except failures.RowFailure as failure:
        return failure


def _outcomes(job, rows, reads, steps):
    """({row key: the stored image (uint8 [S, S, 3]) or its RowFailure}, the steps' times as a shard status
    holds them or None), through the job's RowPreprocessor."""
    from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
    from tf_serving_input.codecs import parse_record

    preprocessor = RowPreprocessor(job.preprocess, job.max_file_bytes, steps=steps, step_timeout=job.step_timeout,
                                   features=job.features)
    try:
        batch = [(position, row, reads[row.key]) for position, row in enumerate(rows)]
        outcomes = {}
        for start in range(0, len(batch), 8):  # At most ROWS_PER_CALL rows a call, as the job's reader gives them.
            for _, row, outcome in preprocessor.preprocess_batch(batch[start:start + 8]):
                if not isinstance(outcome, failures.RowFailure):
                    outcome = parse_record(outcome.record, job.preprocess)[0].numpy()
                outcomes[row.key] = outcome
        return outcomes, preprocessor.take_step_times()
    finally:
        preprocessor.close()


def step_timings(job, datas, python_times=None):
    """[(record, [seconds an image], set-up seconds or None)] of each step, on the images it gets in the job.

    A Python step is never called here (it could hang or end this process): its times are those its step
    process measured (`python_times`, a shard status's `step_times`), given as their mean; a TF step after it
    is timed on the image before it."""
    import tensorflow as tf

    from tf_serving_input import steps as image_steps
    from tf_serving_input.preprocessing import inspect_and_decode_for_steps, resize_stepped

    if not job.steps:
        return []
    config = job.preprocess

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)], autograph=False)
    def decode(data):
        image, problem, _ = inspect_and_decode_for_steps(data, config)
        return problem, image

    resize = tf.function(lambda image: resize_stepped(image, config), autograph=False)
    calls, set_ups = [], []
    for record in job.steps:
        fn = image_steps.load(record)
        set_up = None
        if record.kind == image_steps.PYTHON:
            call = None
        elif record.kind == image_steps.BATCH:
            call = image_steps.trace_batch(fn, record, config.image_size)
        else:
            call = image_steps.trace(fn, record)
        calls.append(call)
        set_ups.append(set_up)
    times = [[] for _ in job.steps]
    resized = []
    for data in datas:
        try:
            problem, image = decode(tf.constant(data))
        except tf.errors.OpError:
            continue
        if int(problem):
            continue
        for index, (record, call) in enumerate(zip(job.steps, calls)):
            if record.kind == image_steps.BATCH:
                resized.append(resize(image))
                break
            if image.shape.rank != 3:
                break
            if record.kind == image_steps.PYTHON:
                continue  # Timed in its step process (below).
            out = _timed(call, image, times[index])
            if out is None:
                break  # The step failed on this image: the sheet shows how; later steps never see it.
            image = tf.constant(out)
    batch_at = [index for index, record in enumerate(job.steps) if record.kind == image_steps.BATCH]
    if resized and batch_at:
        images = tf.stack(resized)
        for index in batch_at:
            spent = []
            out = _timed(calls[index], images, spent)
            if out is None:
                break
            images = tf.constant(out)
            times[index] = [spent[0] / len(resized)] * len(resized)
    for taken in python_times or ():
        record = job.steps[taken["position"]]
        if record.kind == image_steps.PYTHON and taken["images"]:
            times[taken["position"]] = [taken["seconds"] / taken["images"]] * taken["images"]
    return list(zip(job.steps, times, set_ups))


def _timed(call, image, spent):
    """call(image), its seconds appended to `spent` (after an untimed first call); None when it fails or returns
    no uint8 image (the sheet shows the job's reason)."""
    import numpy as np

    from tf_serving_input.steps import python_output_problem

    def once():
        out = call(image)
        return out.numpy() if hasattr(out, "numpy") else out  # A tensor's value: eager ops may run ahead.

    try:
        if not spent:
            once()  # Tracing, first-call caches: not the step's time per image.
        started = time.perf_counter()
        out = once()
        spent.append(time.perf_counter() - started)
    except Exception:  # noqa: BLE001 - the row's failure shows on the sheet, with the job's reason.
        return None
    if not isinstance(out, np.ndarray) or (out.ndim == 3 and python_output_problem("", out) is not None) or (
            out.ndim == 4 and out.dtype != np.uint8):
        return None
    return out


def render_preview(rows, before, after, config, path):
    """The contact sheet: one line per row, before (no steps) then after (with the steps), each captioned."""
    import numpy as np

    from beam_pipeline.common.contact_sheet import render_contact_sheet

    size = config.image_size
    blank = np.zeros([size, size, 3], np.uint8)
    width = max(4, (size + 4) // 6)  # Characters of the default font under one image.
    tiles = []
    for row in rows:
        for outcome, what in ((before[row.key], "before"), (after[row.key], "after")):
            if isinstance(outcome, failures.RowFailure):
                tiles.append((blank, terminal.shown(f"{outcome.reason}: {outcome.detail}", width), None))
            else:
                tiles.append((outcome, terminal.shown(f"{what}: {os.path.basename(row.source)}", width), None))
    render_contact_sheet(tiles, path, columns=2)


def format_preview(job, rows, after, timings, sheet):
    """What the preview prints: each step's time per image, the rows that failed, where the sheet is."""
    from tf_serving_input import steps as image_steps

    lines = [f"Preview of the first {len(rows)} rows of {job.input_csv}: nothing written to {job.output_dir}"]
    for record, times, set_up in timings:
        if times and record.kind == image_steps.BATCH:  # One timed call on the batch of every row's image.
            took = f"{times[0] * 1000:.1f} ms an image (one batch of {len(times)})"
        elif times and record.kind == image_steps.PYTHON:  # Its step process's total over the images.
            took = f"{times[0] * 1000:.1f} ms an image (mean of {len(times)}, in its step process)"
        elif times:
            took = (f"{statistics.median(times) * 1000:.1f} ms an image (median of {len(times)}; "
                    f"max {max(times) * 1000:.1f} ms)")
        else:
            took = "no image got through it"
        extra = f"; set-up once per worker {set_up:.2f} s" if set_up is not None else ""
        lines.append(f"  step {record.position + 1} {record.name} ({record.kind}): {took}{extra}")
    failed = [(row, after[row.key]) for row in rows if isinstance(after[row.key], failures.RowFailure)]
    lines.append(f"  {len(rows) - len(failed)} rows written, {len(failed)} failed"
                 + ("" if not failed else ", as the job would record them:"))
    for row, failure in failed:
        lines.append(f"    {terminal.shown(row.source, terminal.PATH_WIDTH)} (line {row.line}): {failure.reason}: "
                     f"{terminal.shown(failure.detail, 160)}")
    lines.append(f"Contact sheet (before | after the steps): {sheet}")
    return "\n".join(lines)
