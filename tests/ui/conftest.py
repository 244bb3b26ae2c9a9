"""The UI's HTTP tests: one real run (job, export, predict into the embedded PostgreSQL, a quality folder) and the
UI's command line serving it on a free port, shared by this folder's tests."""

import pytest

import postgres_servers
import ui_run


@pytest.fixture(scope="session")
def ui_inputs(tmp_path_factory):
    """The run's folders and the database URL (the embedded server, stopped at the end)."""
    folder = tmp_path_factory.mktemp("ui_run")
    with postgres_servers.embedded(str(tmp_path_factory.mktemp("ui_pg"))) as url:
        run = ui_run.build_run(folder, url)
        run["quality"], run["quality_keys"] = ui_run.write_quality_folder(folder / "quality", run["job"])
        yield run


@pytest.fixture(scope="session")
def ui_server(ui_inputs, tmp_path_factory):
    """(base URL, log path) of the UI with every part lit: predictions, export, database, quality folder."""
    log = tmp_path_factory.mktemp("ui_log") / "ui.log"
    process, url = ui_run.start_ui("--input_dir", ui_inputs["job"], "--predictions_dir", ui_inputs["predictions"],
                                   "--model_dir", ui_inputs["export"], "--database", ui_inputs["database"],
                                   "--quality_dir", ui_inputs["quality"], "--max_file_bytes", 1_000_000,
                                   log_path=log)
    try:
        yield url, log
    finally:
        ui_run.stop_ui(process)
