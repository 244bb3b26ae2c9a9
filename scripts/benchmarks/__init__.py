"""The benchmark behind `python scripts/benchmark.py` (see that script's docstring for what it measures).

    harness.py   interleaved repetitions, wall time, peak RSS, marginal rates, the machine's share
    targets.py   the targets table
    data.py      the image sets, made from real photographs
    loops.py     the job's bare-loop baselines (TensorFlow, Pillow)
    pipelines.py the reader's tf.data baselines ('before', 'after', from_directory, same work)
    job.py storage.py reader.py end_to_end.py shrink.py stages.py predict.py search.py
                 one module per measured group of ratios, each `measure(bench, ...)`
    step_fns.py  the steps section's own --image_step functions (steps.py)
    report.py    docs/benchmarks.md, the chart, README's table
    cli.py       the flags and the order of the sections
"""
