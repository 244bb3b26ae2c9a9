"""What the scale-out tests share: the small dataset, the local runner's output over it, and the local
predictions over that output, each made once a session in this process (tests/in_process.py: the same
bytes as the default runner's, without a subprocess's start-up). Read-only for the tests: each runner's
test writes its own output beside them, from the data folder (relative paths: the workers run elsewhere).
"""

import dataclasses
import pathlib

import pytest

import in_process
import scaleout


@dataclasses.dataclass(frozen=True)
class SmallRun:
    """The small dataset's folder, its CSV and rows, and the local runner's output over it."""

    folder: pathlib.Path
    csv_path: pathlib.Path
    rows: list
    local: pathlib.Path


@pytest.fixture(scope="session")
def small_run(tmp_path_factory):
    """The local runner's output over scaleout.make_small_dataset: every runner's output must equal it."""
    folder = tmp_path_factory.mktemp("small_dataset")
    csv_path, rows = scaleout.make_small_dataset(folder)
    local = folder / "out_local"
    result = in_process.run_module("beam_pipeline", *scaleout.job_command(csv_path, local)[3:])
    assert result.returncode == 0, result.stderr[-3000:]
    return SmallRun(folder, csv_path, rows, local)


@pytest.fixture(scope="session")
def small_predictions(small_run):
    """(the exported small model, the local predict run over small_run's output with it)."""
    export = scaleout.export_small_model(small_run.local, small_run.folder / "export")
    predictions = small_run.folder / "pred_local"
    result = in_process.predict(*scaleout.predict_command(export, small_run.local, predictions)[3:])
    assert result.returncode == 0, result.stderr[-3000:]
    return export, predictions
