"""The whole job (TFT included) on Beam's PortableRunner with workers in a separate worker pool.

The job service (`local_job_service_main`) and the worker pool (`worker_pool_main`)
run as their own processes, as a cluster's would: the workers share nothing with
the launching process (not its working directory, not its imported modules), so
pickling, import and relative-path mistakes show up here as they would on Flink
or Dataflow. The output must equal a default-runner run of the same CSV.
"""

import os
import sys

import pytest

import outputs
import scaleout


@pytest.fixture(scope="module")
def portable_services(tmp_path_factory):
    """(job endpoint, worker pool endpoint) of a job service and a worker pool on free localhost ports."""
    folder = tmp_path_factory.mktemp("portable_services")
    # The pool starts each worker with the `python` found on PATH: the venv's.
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TF_CPP_MIN_LOG_LEVEL="3")
    job_port, pool_port = scaleout.free_port(), scaleout.free_port()
    while pool_port == job_port:
        pool_port = scaleout.free_port()
    started = []
    try:
        started.append(scaleout.start_server(
            [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
             f"--port={job_port}"], job_port, folder / "job_service.log", env=env, cwd=folder))
        started.append(scaleout.start_server(
            [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
             f"--service_port={pool_port}"], pool_port, folder / "worker_pool.log", env=env, cwd=folder))
        yield f"localhost:{job_port}", f"localhost:{pool_port}"
    finally:
        for process in reversed(started):
            scaleout.stop_server(process)


def test_portable_runner_with_external_worker_pool_matches_the_local_runner(portable_services, small_run):
    job_endpoint, pool_endpoint = portable_services
    folder = small_run.folder
    # Relative --input_csv and --output_dir, from the data folder: the workers run elsewhere.
    result = scaleout.run_job(
        os.path.relpath(small_run.csv_path, folder), "out_portable",
        "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
        "--environment_type=EXTERNAL", f"--environment_config={pool_endpoint}",
        *scaleout.small_step_flags(folder), cwd=folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    scaleout.assert_small_dataset_run_matches(small_run.local, folder / "out_portable", small_run.rows,
                                              "PortableRunner")


def test_predict_job_on_the_portable_runner_matches_the_local_run(portable_services, small_run, small_predictions):
    """The predict job (RunInference, Parquet shards) in workers of a separate pool: identical Parquet."""
    job_endpoint, pool_endpoint = portable_services
    folder, (export, local_predictions) = small_run.folder, small_predictions
    result = scaleout.run_predict_killing_group(
        os.path.relpath(export, folder), os.path.relpath(small_run.local, folder), "pred_portable",
        "--runner=PortableRunner", f"--job_endpoint={job_endpoint}", "--environment_type=EXTERNAL",
        f"--environment_config={pool_endpoint}", cwd=folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert outputs.manifest(folder / "pred_portable")["runner"] == "PortableRunner"
    outputs.assert_same_predictions(local_predictions, folder / "pred_portable")
