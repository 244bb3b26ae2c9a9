"""A Python --image_step at run time (issue 51, items 2 and 6): a step that raises, hangs, prints, calls sys.exit,
os._exit or segfaults; --step_timeout; --max_error_rate; each step's time per image.

The hostile step (tests/steps_hostile/hostile.py) picks what it does by the image's red level, so that one
preprocessor, or one run, meets every behaviour. The everyday tests call the preprocessor in this process
(its step process is real: a child process); the slow one runs the command twice (a crash in a Beam worker process, then
the same command resuming).
"""

import json
import os
import shutil

import pytest

import imaging
import in_process
import outputs
import said
from beam_pipeline.inputs import rows as source
from beam_pipeline.preprocess import step_process, step_timing
from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
from tf_serving_input import failures, steps
from tf_serving_input.features import PreprocessConfig

SIZE = 8
HOSTILE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "steps_hostile", "hostile.py")
TIMEOUT = 2.0  # A step that never returns meets it; the others take microseconds.


def png(red):
    return imaging.encode(imaging.solid((red, 20, 30), 12, 10), "PNG")


def hostile_record(folder):
    """The hostile step, copied into `folder` (its crash_now marker lies beside the copy): its StepRecord."""
    shutil.copy(HOSTILE, folder / "hostile.py")
    return steps.resolve(f"{folder / 'hostile.py'}:hostile", 0)[0]


def rows_of(folder, reds):
    rows = []
    for index, red in enumerate(reds):
        (folder / f"red_{red}.png").write_bytes(png(red))
        rows.append(source.Row(index=index, line=index + 2, source=f"red_{red}.png",
                               path=str(folder / f"red_{red}.png"), label="a", split="train",
                               key=source.row_key(index, f"red_{red}.png")))
    return rows


def test_a_step_that_raises_or_hangs_fails_its_row_and_the_rest_go_on_printing_nothing_to_stdout(tmp_path, capfd):
    record = hostile_record(tmp_path)
    # Every 7th raises; 250 never returns (stopped at the timeout, its process replaced); the rows after it run.
    # 249 returns 1000x1200 pixels, more than --max_pixels (a step's output is bounded as a decoded image is).
    reds = list(range(1, 16)) + [249, 250, 16, 17]
    preprocessor = RowPreprocessor(PreprocessConfig(image_size=SIZE, max_pixels=1_000_000), steps=(record,),
                                   step_timeout=TIMEOUT)
    try:
        outcomes = {row.source: outcome for row, outcome in preprocessor(rows_of(tmp_path, reds))}
        times = preprocessor.take_step_times()
    finally:
        preprocessor.close()
    failed = {name: outcome for name, outcome in outcomes.items() if isinstance(outcome, failures.RowFailure)}
    assert failed == {
        "red_7.png": failures.RowFailure(failures.STEP_FAILED, "hostile: ValueError: red level 7 is a multiple of 7"),
        "red_14.png": failures.RowFailure(failures.STEP_FAILED,
                                          "hostile: ValueError: red level 14 is a multiple of 7"),
        "red_249.png": failures.RowFailure(failures.STEP_BAD_OUTPUT, "hostile returned a 1000x1200 image: 1200000 "
                                           "pixels, more than --max_pixels 1000000"),
        "red_250.png": failures.RowFailure(failures.STEP_TIMEOUT, "hostile: still running after --step_timeout 2 s; "
                                           "stopped (its process replaced)")}
    assert len(outcomes) == len(reds)
    captured = capfd.readouterr()
    assert "hostile step" not in captured.out  # Neither print() nor a write to descriptor 1 reaches stdout.
    assert "hostile step says 17" in captured.err and "hostile step writes to fd 1" in captured.err
    [timed] = times
    assert timed["position"] == 0 and timed["images"] == len(reds)  # Raised and timed-out images count too.
    assert sum(timed["histogram"].values()) == len(reds) and timed["seconds"] >= TIMEOUT


def test_a_step_that_ends_its_process_raises_step_crashed_naming_it_and_a_fresh_process_goes_on(tmp_path):
    """sys.exit, os._exit and a segfault: each a StepCrashed naming the step (the run's one line), never a row's."""
    record = hostile_record(tmp_path)
    (tmp_path / "crash_now").touch()
    process = step_process.StepProcess([record], timeout=TIMEOUT)
    try:
        for red, how in [(251, "exit status 3"), (254, "exit status 7"), (253, "killed by SIGSEGV")]:
            assert isinstance(process.call(0, imaging.solid((1, 20, 30), 4, 4)), step_process.Ran)
            with pytest.raises(step_process.StepCrashed) as crashed:
                process.call(0, imaging.solid((red, 20, 30), 4, 4))
            line = step_process.crash_line(f"RuntimeError: Traceback ...\n  {crashed.value}\n")  # As relayed.
            assert line == f"--image_step {record.spec} ended the process it runs in on an image ({how}" + (
                ": os._exit or sys.exit in the step?)" if "exit" in how else ")")
        assert process.starts == 3
    finally:
        process.close()


def test_a_set_up_that_fails_or_hangs_ends_the_run_in_one_line_naming_the_step(tmp_path):
    """Found by the hostile trial: a set-up that raised gave 'RuntimeError: ... RuntimeError' with the wrong fix, and
    one that hung stalled the run forever, whatever --step_timeout. Now each is a StepCrashed (the run's one line),
    a hang bounded by 10 x --step_timeout, in a step process and (a failure) in the worker alike."""
    shutil.copy(HOSTILE, tmp_path / "hostile.py")
    failing, hanging = (steps.resolve(f"{tmp_path / 'hostile.py'}:{name}", 0)[0]
                        for name in ("failing_set_up", "hanging_set_up"))
    with pytest.raises(step_process.StepCrashed) as crashed:
        step_process.StepProcess([failing], timeout=TIMEOUT).start()
    assert step_process.crash_line(str(crashed.value)) == (
        f"the set-up of step {failing.spec} failed: RuntimeError: set-up boom")
    process = step_process.StepProcess([hanging], timeout=0.2)
    with pytest.raises(step_process.StepCrashed) as crashed:
        process.start()
    assert step_process.crash_line(str(crashed.value)) == (
        f"the set-up of --image_step {hanging.spec} did not finish within 2 s (10 x --step_timeout)")
    process.close()
    with pytest.raises(step_process.StepCrashed) as crashed:  # --step_timeout 0: set up in this process.
        RowPreprocessor(PreprocessConfig(image_size=SIZE), steps=(failing,), step_timeout=0)
    assert "set-up boom" in step_process.crash_line(str(crashed.value))


def test_a_python_step_gets_a_read_only_image_and_may_return_a_view_of_it(tmp_path):
    (tmp_path / "views.py").write_text(
        "from beam_pipeline import python_step\n\n\n@python_step\ndef top(image):\n    return image[:2]\n\n\n"
        "@python_step\ndef in_place(image):\n    image += 1\n    return image\n")
    records = [steps.resolve(f"{tmp_path / 'views.py'}:{name}", position)[0]
               for position, name in enumerate(["top", "in_place"])]
    process = step_process.StepProcess(records, timeout=None)
    image = imaging.quadrants(6, 4)
    try:
        ran = process.call(0, image)
        assert (ran.image == image[:2]).all()
        raised = process.call(1, image)
        assert isinstance(raised, step_process.Raised) and "read-only" in raised.line
        assert (process.call(0, imaging.quadrants(10, 8)).image == imaging.quadrants(10, 8)[:2]).all()  # Grown.
    finally:
        process.close()


def test_step_times_give_percentiles_and_shares():
    times = step_timing.StepTimes(2)
    for _ in range(98):
        times.add(0, 0.010)
    times.add(0, 0.5)
    times.add(0, 0.5)
    times.add(1, 0.001)
    first = times.take()
    assert times.take()[0]["images"] == 0  # Taken: it starts again.
    record = [steps.StepRecord("/a/s.py:slow", steps.PYTHON, 0, "0" * 64),
              steps.StepRecord("/a/s.py:fast", steps.TF, 1, "0" * 64)]
    statuses = [{"seconds": 1.5, "step_times": first}, {"seconds": 0.5}]  # A shard with no step times (resumed).
    timing = step_timing.summarize(statuses, record)
    slow, fast = timing["steps"]
    assert slow["images"] == 100 and 9 <= slow["p50_ms"] <= 11 and 450 <= slow["p99_ms"] <= 550
    assert slow["share"] == pytest.approx((0.98 + 1.0) / 2.0, abs=1e-3) and fast["images"] == 1
    [line, _] = step_timing.summary_rows({"step_timing": timing})
    assert line[0] == "step 1 slow" and line[1].startswith("p50 ") and "of the workers' time" in line[1]
    assert step_timing.summarize([{"seconds": 1.0}], record) is None


def run_args(folder, out, *extra):
    return ["preprocess", "--input_csv", str(folder / "in.csv"), "--output_dir", str(out), "--image_size",
            str(SIZE), "--no_progress", "--num_shards", "2", "--step_timeout", str(TIMEOUT), "--max_error_rate",
            "0.1", "--image_step", f"{folder / 'hostile.py'}:hostile", *extra]


@pytest.mark.slow  # Two runs: the first in a Beam worker process (its crash relayed as text), the resume in memory.
def test_a_run_whose_step_ends_its_worker_exits_1_naming_it_and_the_same_command_resumes(tmp_path, capfd):
    hostile_record(tmp_path)
    # Every 7th raises (2), 250 hangs (1), 254 calls os._exit while crash_now is there: 3 failed of 21 > 10 %.
    reds = list(range(1, 19)) + [250, 254, 19]
    rows = rows_of(tmp_path, reds)
    imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [[row.source, "a"] for row in rows])
    out = tmp_path / "out"
    (tmp_path / "crash_now").touch()
    # The command's run(argv) here, its worker a real process (which shares this process's descriptors 1 and 2).
    crashed = in_process.run_module("beam_pipeline", *run_args(tmp_path, out, "--direct_num_workers", "1",
                                                                "--direct_running_mode", "multi_processing"))
    assert crashed.returncode == 1, crashed.stderr
    assert "hostile step" not in crashed.stdout + crashed.stderr + capfd.readouterr().out
    [line] = said.problems(crashed.stderr)
    assert line.startswith(f"error: --image_step {tmp_path / 'hostile.py'}:hostile ended the process it runs in on "
                           "an image (exit status 7: os._exit or sys.exit in the step?); the finished shards are "
                           "kept: fix the step and run the same command again to resume (details: "), line
    (tmp_path / "crash_now").unlink()
    resumed = in_process.run_module("beam_pipeline", *run_args(tmp_path, out))
    # The run finishes; the step's failures count against --max_error_rate like any other (3 of 21 > 10 %).
    assert resumed.returncode == 1, resumed.stderr
    assert "hostile step" not in resumed.stdout + capfd.readouterr().out
    [budget] = said.problems(resumed.stderr)
    assert budget.startswith("error: 3 of 21 rows failed (14.3%), more than --max_error_rate=0.1") and \
        "step_failed: 2" in budget and "step_timeout: 1" in budget
    manifest = outputs.manifest(out)
    assert manifest["failed_by_reason"] == {"step_failed": 2, "step_timeout": 1}
    [timing] = manifest["step_timing"]["steps"]
    assert timing["images"] == 21 and timing["p99_ms"] >= TIMEOUT * 1000 * 0.9 and 0 < timing["share"] < 1
    assert "step 1 hostile" in resumed.stdout and "p50 " in resumed.stdout
    report = json.loads(in_process.run_module("beam_pipeline", "inspect", str(out), "--format", "json").stdout)
    assert report["failed_by_reason"] == {"step_failed": 2, "step_timeout": 1}


def test_step_timeout_flag():
    from beam_pipeline.preprocess import options

    argv = ["--input_csv", "in.csv", "--output_dir", "out"]
    assert options.parse_args(argv)[0].step_timeout == step_process.DEFAULT_TIMEOUT == 60.0
    assert options.parse_args(argv + ["--step_timeout", "0"])[0].step_timeout == 0
    job = options.parse_args(argv + ["--step_timeout", "2.5"])[0]
    assert job.step_timeout == 2.5 and "step_timeout" not in json.dumps(job.to_dict())  # A resume may change it.
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit) as refused:
            options.parse_args(argv + ["--step_timeout", bad])
        assert refused.value.code == 2


@pytest.mark.slow  # The preview traces the job's graph twice.
def test_a_preview_runs_python_steps_as_the_job_does_under_the_timeout_and_a_crash_is_one_line(tmp_path, capsys):
    """Found by the hostile trial: --preview called a Python step in its own process, so a step that never returned
    hung the preview whatever --step_timeout, and sys.exit ended the command silently (exit 3)."""
    from beam_pipeline.preprocess import options
    from beam_pipeline.preprocess.preview import run_preview

    record = hostile_record(tmp_path)
    for red in (1, 250, 251):
        (tmp_path / f"red_{red}.png").write_bytes(png(red))

    def preview(*reds):
        imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [[f"red_{red}.png", "a"] for red in reds])
        job, _ = options.parse_args(["--input_csv", str(tmp_path / "in.csv"), "--output_dir", str(tmp_path / "out"),
                                     "--image_size", str(SIZE), "--image_step", record.spec, "--step_timeout", "1",
                                     "--preview", str(len(reds)), "--contact_sheet", str(tmp_path / "sheet.png")])
        return run_preview(job, job.contact_sheet), capsys.readouterr()

    code, said_ = preview(1, 250)
    assert code == 0, said_.err
    assert "red_250.png (line 3): step_timeout: hostile: still running after --step_timeout 1 s" in said_.out
    assert "step 1 hostile (python): " in said_.out and "in its step process" in said_.out
    code, said_ = preview(1, 251)
    assert code == 1 and said.problems(said_.err) == [
        f"error: --image_step {record.spec} ended the process it runs in on an image (exit status 3: os._exit or "
        "sys.exit in the step?)"], said_.err
    assert not (tmp_path / "out").exists()
