"""Shared fixtures. Tests run on tiny images they generate, plus the bundled sample photos."""

import dataclasses
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# One TensorFlow thread in every test process, as in the local runner's worker processes (common/runners.py):
# a float op's last bit can depend on the thread count. Measured on an AMD EPYC CI machine: the predict job
# in memory with TF's default pools gave embeddings 1 ulp off the worker processes' at edb31fc (three
# test_predict byte-identity tests failed there; all pass with one thread). The tests compare outputs across
# worker counts and modes, which is a promise at one thread count. pytest-xdist runs one process per core.
for _variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
    os.environ.setdefault(_variable, "1")

import signal  # noqa: E402

# Ctrl-C's tests (tests/common/test_worker_stop.py, test_reliability.py) send SIGINT to this process and to the
# commands it starts, which inherit its disposition: a suite started as a background job of a shell without job
# control (`cmd &` in a script) ignores SIGINT, and those tests then failed waiting for an interrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402

# The tests' HTTP servers are on loopback: a proxy a machine exports (CI may) must not stand in between.
for _proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
    os.environ.pop(_proxy, None)

# Each test's CPU seconds in the JUnit XML (tests/cpu_time.py), which scripts/test_times.py sums per file.
pytest_plugins = ["cpu_time"]

TESTS_DIR = pathlib.Path(__file__).resolve().parent
# Every test in these folders is slow (real command lines in subprocesses, scale-out runners):
# marked here by its folder, so no file can forget its mark. Elsewhere tests are in-process.
SLOW_FOLDERS = ("end_to_end", "scale_out")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO_ROOT, "sample_data")


# Session fixtures too costly to build twice: the modules that use one run on one pytest-xdist worker.
SHARED_GROUPS = {"ui_inputs": "ui_run", "ui_server": "ui_run", "small_run": "small_run",
                 "small_predictions": "small_run"}


@pytest.hookimpl(tryfirst=True)  # Before `-m "not slow"` deselects by marker, and before xdist reads groups.
def pytest_collection_modifyitems(config, items):
    """Marks every test under SLOW_FOLDERS slow, and groups tests for pytest-xdist (`--dist loadgroup`).

    A module's tests stay on one worker (its module fixtures are built once), and the modules that share
    one of SHARED_GROUPS' session fixtures stay together; the groups are spread over the workers. A module
    that sets `SPREAD_OVER_WORKERS = True` (no module fixtures, and long) is grouped by test function instead.
    """
    group_of_module = {}
    for item in items:
        if pathlib.Path(str(item.path)).resolve().relative_to(TESTS_DIR).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
        module = item.nodeid.split("::")[0]
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in SHARED_GROUPS:
                group_of_module[module] = SHARED_GROUPS[fixture]
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.split("::")[0]
            group = group_of_module.get(module, module)
            if group == module and getattr(getattr(item, "module", None), "SPREAD_OVER_WORKERS", False):
                # A long module without module fixtures: one group per test function (its cases share what
                # they trace), so that it does not hold one worker while the other has nothing left to do.
                group = f"{module}::{getattr(item, 'originalname', item.name)}"
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="module")
def loopback():
    """A real HTTP server on 127.0.0.1 for the module's URL rows (tests/http_server.py), stopped at its end."""
    import http_server

    server = http_server.LoopbackServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def sample_photos():
    """A few real photographs from the bundled sample dataset: (path, label)."""
    return [(os.path.join(SAMPLE_DIR, "images", label, name), label) for label, name in
            [("cat", "cat_000.jpg"), ("coffee", "coffee_007.png"), ("astronaut", "astronaut_003.jpg"),
             ("rocket", "rocket_011.jpg")]]


TINY_COLUMNS = (("caption", "text"), ("tags", "labels"), ("score", "float"), ("count", "int"), ("emb", "floats"),
                ("objects", "boxes"), ("classes", "labels"))


def tiny_cells(i, label):
    """Row i's cells of TINY_COLUMNS: a caption (hostile; missing in every fifth row), 1-2 tags (never none: the
    multi-label run `tiny_raw_job` reads them as its labels), a score (missing in every third), an int, 1-2
    floats, 0-2 boxes with their classes."""
    boxes = [f"0.{i % 5} 0.1 0.9 0.{5 + i % 4}", "0 0 1 1"][:i % 3]
    return ["" if i % 5 == 0 else f"{label} \u00e9\"'\u202e\U0001f600, \n{i}" * (1 + i % 2),
            label if i % 2 else f"{label}|tiny",
            "" if i % 3 == 0 else f"{i / 8}", str(i - 6), "|".join(str(i + k / 4) for k in range(1 + i % 2)),
            "|".join(boxes), "|".join(["cat", "dog"][:len(boxes)])]


@pytest.fixture(scope="session")
def tiny_job(tmp_path_factory):
    """A finished job output made in this process (16 px, JPEG storage): (output_dir, image folder, rows).

    12 small JPEG/PNG images in 3 classes, train and validation. The job runs on the
    in-process runner (no worker processes), so in-process tests can use a real output.
    Each row keeps a column of every type (`TINY_COLUMNS`: some values missing, hostile text),
    so that every reader of this run reads records that carry kept columns; a row is
    [path, label, split, *those columns' cells].
    """
    import numpy as np

    import built_once
    import imaging
    from beam_pipeline.preprocess import cli as main

    rng = np.random.default_rng(2)
    rows, images = [], {}
    for i in range(12):
        label = ("cat", "dog", "bird")[i % 3]
        image = imaging.quadrants(int(rng.integers(20, 40)), int(rng.integers(20, 40)))
        image[..., i % 3] = 40 * (i % 6)
        name = f"img{i}.png" if i % 2 else f"img{i}.jpg"
        images[name] = imaging.encode(image, "PNG" if i % 2 else "JPEG")
        rows.append([name, label, "validation" if i % 4 == 0 else "train", *tiny_cells(i, label)])

    def build(folder):
        for name, data in images.items():
            (folder / name).write_bytes(data)
        imaging.write_csv(folder / "in.csv", ["path", "label", "split", *(name for name, _ in TINY_COLUMNS)], rows)
        code = main.run(["--input_csv", str(folder / "in.csv"), "--output_dir", str(folder / "out"),
                         "--image_size", "16", "--image_format", "jpeg", "--num_shards", "2", "--no_progress",
                         "--direct_num_workers", "1", "--direct_running_mode", "in_memory",
                         "--box_class_column", "classes",
                         *(flag for name, kind in TINY_COLUMNS for flag in ("--column", f"{name}:{kind}"))])
        assert code == 0
        return str(folder)

    folder = pathlib.Path(built_once.built_once(tmp_path_factory, "tiny_job", build))
    return str(folder / "out"), folder, rows


@dataclasses.dataclass(frozen=True)
class ColumnsJob:
    """`columns_job`: the run's folder, its summary (stdout), its FeatureSpec, and the train rows it wrote (each
    a dict of the CSV's typed values: None when missing; `label` a tuple of labels)."""

    out: str
    stdout: str
    spec: object
    train_written: list

    @property
    def out_path(self):
        return pathlib.Path(self.out)


@pytest.fixture(scope="session")
def columns_job(tmp_path_factory):
    """A finished job that keeps columns (issue 52), made in this process (8 px, one shard a split): a float,
    labels, boxes with their classes, an int with a hostile name (`id,"é`), and a multi-label label; one row
    with a bad cell, one missing file, a validation row. Read-only: copy it before changing anything."""
    import built_once
    import imaging
    import in_process
    from beam_pipeline.preprocess.options import parse_args

    header = ["path", "label", "split", "score", "tags", "objects", "cls", 'id,"é']
    cells = [
        ["i0.png", "cat|dog", "train", "0.5", "a|b", "[[0,0,1,1],[0.1,0.1,0.2,0.2]]", "car|person", "1"],
        ["i1.png", "dog", "train", "", "a", "", "", "2"],
        ["i2.png", "", "train", "1e3", "b\u202e|c d", "0 0 1 1", "car", ""],
        ["i3.png", "cat", "validation", "7", "z", "", "", "5"],
        ["i4.png", "cat|x y", "train", "-2.25", "", "[[0,0,0.5,0.5]]", "car", "9007199254740993"],
        # A label holding a zero-width space (not whitespace to strip: TFT keeps it; one of it alone is blank, a bad
        # value), one holding the ':' that joins a column's index to its labels in the graph's vocabulary.
        ["i5.png", "cat", "train", "0.1", "a|z\u200b|x:y", "", "", "-3"],
        ["missing.png", "cat", "train", "0.1", "a", "", "", "-3"],
        ["i6.png", "cat", "train", "abc", "a", "", "", "-3"],  # A bad float: the row fails as bad_value.
    ]
    flags = ["--image_size", "8", "--num_shards", "1", "--no_progress", "--max_error_rate", "0.5",
             "--column", "score:float", "--column", "tags:labels", "--column", "objects:boxes", "--column",
             "cls:labels", "--box_class_column", "cls", "--column", "label:labels", "--column", 'id,"é:int']

    def build(folder):
        for i in range(7):
            (folder / f"i{i}.png").write_bytes(imaging.encode(imaging.solid((30 * i, 20, 30), 8, 8), "PNG"))
        imaging.write_csv(folder / "in.csv", header, cells)
        done = in_process.run_module("beam_pipeline", "--input_csv", str(folder / "in.csv"), "--output_dir",
                                     str(folder / "out"), *flags)
        assert done.returncode == 0, done.stderr
        return [str(folder), done.stdout]

    where, stdout = built_once.built_once(tmp_path_factory, "columns_job", build)
    folder = pathlib.Path(where)
    spec = parse_args(["--input_csv", str(folder / "in.csv"), "--output_dir", str(folder / "out"), *flags])[0].features

    def typed(row):
        split = lambda cell: tuple(cell.split("|")) if cell else None  # noqa: E731
        boxes = {"[[0,0,1,1],[0.1,0.1,0.2,0.2]]": 2, "0 0 1 1": 1, "[[0,0,0.5,0.5]]": 1}
        return {"score": float(row[3]) if row[3] else None, "tags": split(row[4]),
                "objects": (None,) * boxes[row[5]] if row[5] else None, "cls": split(row[6]),
                "id": int(row[7]) if row[7] else None, "label": split(row[1])}

    written = [typed(row) for row in cells if row[2] == "train" and (folder / row[0]).exists() and row[3] != "abc"]
    return ColumnsJob(str(folder / "out"), stdout, spec, written)


@pytest.fixture(scope="session")
def tiny_raw_job(tiny_job, tmp_path_factory):
    """tiny_job's images through the job again with the default (raw) storage, as a multi-label run (its `tags`
    column the labels: 1-2 a row), keeping no other column: its output_dir."""
    import built_once
    from beam_pipeline.preprocess import cli as main

    _, tiny_folder, _ = tiny_job

    def build(folder):
        out = folder / "out_raw"
        code = main.run(["--input_csv", str(tiny_folder / "in.csv"), "--output_dir", str(out), "--image_size",
                         "16", "--num_shards", "2", "--no_progress", "--direct_num_workers", "1",
                         "--direct_running_mode", "in_memory", "--label_column", "tags", "--column", "tags:labels"])
        assert code == 0
        return str(out)

    return built_once.built_once(tmp_path_factory, "tiny_raw_job", build)


# ---------------------------------------------------------------------------------------------- shared runs
# Built once a test session and read by many tests (the list and the rules: ARCHITECTURE.md, "Tests").
# Read-only for the tests that share them: a test that must change or break something copies the part it
# needs (shutil.copytree) or makes its own small run.


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory):
    """The URL of one embedded PostgreSQL + pgvector server for the session, stopped (by its PID) at the end.

    Tests that share it use tables of their own names.
    """
    import postgres_servers

    with postgres_servers.embedded(str(tmp_path_factory.mktemp("pg_session"))) as url:
        yield url


@pytest.fixture(scope="session")
def ui_inputs(tmp_path_factory, pg_url):
    """The UI's run (tests/ui_run.py): job, export, predictions loaded into `pg_url` (table ui_sample), quality."""
    import ui_run

    folder = tmp_path_factory.mktemp("ui_run")
    run = ui_run.build_run(folder, pg_url)
    run["quality"], run["quality_keys"] = ui_run.write_quality_folder(folder / "quality", run["job"])
    return run


UI_UPLOAD_TIMEOUT = 4  # Seconds the shared UI waits for an upload's body (the default is 60).
UI_UPLOAD_READ_TIMEOUT = 2  # Seconds it waits for the next piece of one (the default is 10).


@pytest.fixture(scope="session")
def ui_server(ui_inputs, tmp_path_factory):
    """(base URL, log path) of the UI's real server process over `ui_inputs`, every part lit.

    Its log must hold no traceback when the session ends.
    """
    import ui_run

    log = tmp_path_factory.mktemp("ui_log") / "ui.log"
    process, url = ui_run.start_ui("--input_dir", ui_inputs["job"], "--predictions_dir", ui_inputs["predictions"],
                                   "--model_dir", ui_inputs["export"], "--database", ui_inputs["database"],
                                   "--quality_dir", ui_inputs["quality"], "--max_file_bytes", 1_000_000,
                                   "--upload_timeout", UI_UPLOAD_TIMEOUT, "--upload_read_timeout",
                                   UI_UPLOAD_READ_TIMEOUT, log_path=log)
    try:
        yield url, log
    finally:
        ui_run.stop_ui(process)
    assert "Traceback" not in log.read_text()


# The scale-out tests' small dataset, the local runner's output over it and the local predictions over
# that, each made once a session in this process (tests/in_process.py: the same bytes as the default
# runner's, without a subprocess's start-up). Read-only for the tests: each runner's test writes its own
# output beside them, from the data folder (relative paths: the workers run elsewhere).
@dataclasses.dataclass(frozen=True)
class SmallRun:
    """The small dataset's folder, its CSV and rows, and the local runner's output over it."""

    folder: pathlib.Path
    csv_path: pathlib.Path
    rows: list
    local: pathlib.Path


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """The local runner's output over scaleout.make_small_dataset, through its steps (a Python step, then a TF
    step: `scaleout.small_step_flags`): every runner's output must equal it."""
    import in_process
    import scaleout

    folder = tmp_path_factory.mktemp("small_dataset")
    csv_path, rows = scaleout.make_small_dataset(folder)
    local = folder / "out_local"
    result = in_process.run_module("beam_pipeline", *scaleout.job_command(csv_path, local)[3:],
                                   *scaleout.small_step_flags(folder), cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return SmallRun(folder, csv_path, rows, local)


@pytest.fixture(scope="session")
def small_predictions(small_run):
    """(the exported small model, the local predict run over small_run's output with it)."""
    import in_process
    import scaleout

    # Its run has a Python step: the export takes images after the steps (serving_examples for predict).
    export = scaleout.export_small_model(small_run.local, small_run.folder / "export", images_after_steps=True)
    predictions = small_run.folder / "pred_local"
    result = in_process.predict(*scaleout.predict_command(export, small_run.local, predictions)[3:])
    assert result.returncode == 0, result.stderr[-3000:]
    return export, predictions
