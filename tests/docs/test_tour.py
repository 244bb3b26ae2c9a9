"""README's tour runs as written: after `scripts/run_local.sh`, and again after a second run of it.

The commands are read from the files a user reads (README's workflow block, run_local.sh), not copied here,
and run in order, in this process (`in_process`: the same `run(argv)` the console scripts call; train.py's
`main`), in a workspace laid out as the repository is (`sample_data/sample.csv`, `sample_data/images/cat/
cat_000.jpg`) but holding twelve tiny generated images instead of the bundled 320 photos. Only
`docker run` (TensorFlow Serving; no Docker engine here) is left out, and `ui` is started (its real
start-up and app, answered in-process) instead of served until Ctrl-C.

Slow: two passes of both, a model trained and exported once, the embedded server started by each command.
Measured 2026-12-04 (docs/testing.md): 101 s of CPU (96 user, 5 system), 340 s wall on this 2-core machine
shared with other work (load average ~10); `pytest tests/docs/test_tour.py -n 0 -s` prints each command's time.
"""

import contextlib
import importlib.util
import io
import os
import re
import shlex
import time

import pytest
from test_docs import REPO_ROOT, read, shell_blocks

import imaging
import in_process

pytestmark = pytest.mark.slow

RUN_LOCAL = "scripts/run_local.sh"
SKIPPED = ("docker",)  # TensorFlow Serving in a container: no Docker engine in the tests.


def tour_lines():
    """The command lines of README's workflow block, in order."""
    section = read("README.md").split("## The workflow", 1)[1].split("\n## ", 1)[0]
    return [line for line in shell_blocks(section) if line.strip() and not line.lstrip().startswith("#")]


def run_local_lines():
    """run_local.sh's command lines with its variables filled in and the extra arguments ("$@") left out."""
    text = re.sub(r"\\\n\s*", " ", read(RUN_LOCAL))
    variables, lines = {}, []
    for line in text.splitlines():
        line = line.strip()
        assignment = re.fullmatch(r"([A-Z_]+)=(\S+)", line)
        if assignment:
            variables[assignment.group(1)] = assignment.group(2)
        elif line.startswith(".venv/bin/"):
            line = line.replace(' "$@"', "")
            for name, value in variables.items():
                line = line.replace(f'"${name}"', value).replace(f"${name}", value)
            lines.append(re.sub(r"\s*>\s*/dev/null\s*$", "", line))
    return lines


def test_the_tour_and_run_local_are_read_whole():
    tour = [shlex.split(line)[0].split("/")[-1] for line in tour_lines()]
    assert tour.count("beam-image-pipeline") == 6 and tour.count("python") == 1 and tour.count("docker") == 1
    local = " ".join(run_local_lines())
    assert all(f"beam-image-pipeline {name} " in local for name in ("preprocess", "predict", "search", "quality"))
    assert "scripts/train.py" in local and "$" not in local


def sample_like(workspace):
    """The layout of sample_data/ (its CSV, images/cat/cat_000.jpg) with 12 tiny generated images."""
    rows = []
    for i in range(12):
        label = ("cat", "dog")[i % 2]
        image = imaging.quadrants(32, 32)
        image[..., i % 3] = 20 * i
        path = workspace / "sample_data" / "images" / label / f"{label}_{i // 2:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(imaging.encode(image, "JPEG"))
        rows.append([f"images/{label}/{path.name}", label, "validation" if i in (0, 1, 6, 7) else "train"])
    imaging.write_csv(workspace / "sample_data" / "sample.csv", ["path", "label", "split"], rows)
    steps = workspace / "sample_data" / "steps"  # The tour's --image_step example, as the repository has it.
    steps.mkdir()
    (steps / "gray_world.py").write_text(read("sample_data/steps/gray_world.py"))


@contextlib.contextmanager
def working_in(folder):
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def train(argv, workspace):
    """scripts/train.py's main(argv) in this process: (exit code, stdout + stderr)."""
    spec = importlib.util.spec_from_file_location("train_script", os.path.join(REPO_ROOT, "scripts", "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    said = io.StringIO()
    with working_in(workspace), contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        code = module.main(argv)
    return code, said.getvalue()


def ui(argv, workspace):
    """The UI's real start-up for `argv` and its overview and quality pages, answered in this process."""
    from starlette.testclient import TestClient

    from beam_pipeline.ui import cli
    from beam_pipeline.ui.app import create_app
    from beam_pipeline.ui.startup import load_state

    with working_in(workspace):
        args = cli.build_parser().parse_args(argv)
        assert cli._refusal(args) is None, cli._refusal(args)
        state, resources = load_state(args, cli.database_choice(args))
        try:
            client = TestClient(create_app(state), base_url="http://127.0.0.1:8080")
            pages = {page: client.get(page) for page in ("/", "/quality")}
        finally:
            resources.close()
    return 0 if all(r.status_code == 200 for r in pages.values()) else 1, str(
        {page: (r.status_code, r.text[-300:]) for page, r in pages.items()})


def run_line(line, workspace, capfd):
    """Runs one documented command line in `workspace`: (exit code, what it said)."""
    words = shlex.split(line, comments=True)
    program = words[0].split("/")[-1]
    if program == "beam-image-pipeline" and words[1] == "ui":
        return ui(words[2:], workspace)
    if program == "beam-image-pipeline":
        done = in_process.run_module("beam_pipeline", *words[1:], cwd=workspace)
        bypassed = capfd.readouterr()  # psql (db psql) writes to the descriptors themselves.
        return done.returncode, done.stdout + done.stderr + bypassed.out + bypassed.err
    if program == "python" and words[1] == "scripts/train.py":
        return train(words[2:], workspace)
    raise AssertionError(f"the tour test does not know how to run {line!r}")


def test_the_readme_tour_runs_as_written_after_run_local_and_again_after_a_second_run_local(tmp_path, capfd):
    from beam_pipeline.database.server import EmbeddedServer

    sample_like(tmp_path)
    try:
        for attempt in ("first", "second"):
            for source, lines in ((RUN_LOCAL, run_local_lines()), ("README.md", tour_lines())):
                for line in lines:
                    if line.split()[0] in SKIPPED:
                        continue
                    start = time.monotonic()
                    code, said = run_line(line, tmp_path, capfd)
                    with capfd.disabled():
                        print(f"{time.monotonic() - start:6.1f} s  {attempt} {source}: {line[:90]}")
                    assert code == 0, f"{attempt} {source}: {line!r} exited {code}:\n{said[-3000:]}"
                    assert "NOTICE" not in said, f"{attempt} {source}: {line!r} printed a notice:\n{said}"
                    # Keras's "Your input ran out of data" warning, which train.py printed on every first run.
                    assert "ran out of data" not in said, f"{attempt} {source}: {line!r} warned:\n{said}"
    finally:
        EmbeddedServer(str(tmp_path / "output" / "postgres")).stop()
    # What the docs write stays under output/ (covered by .gitignore): nothing beside it in the workspace.
    assert sorted(os.listdir(tmp_path)) == ["output", "sample_data"]
