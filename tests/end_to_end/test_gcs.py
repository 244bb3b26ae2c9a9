"""gs:// end to end (issue 53), against a real GCS protocol server on loopback (tests/gcs_server.py).

The list, the images and every output are on gs://: the job (killed mid-run by SIGKILL, then the same
command resumes it), `inspect`, the tf.data reader, the predict job with its export on gs:// and the
quality job. Beam's gcsio reaches the server through STORAGE_EMULATOR_HOST; TensorFlow's own client
(tensorflow-transform's transform_fn, the reader's TFRecordDataset, the export's SavedModel) through
the server's HTTPS proxy, as tests/gcs_server.py explains. The stored shards must be byte for byte the
local run's (`small_run`, shared with the scale-out tests), and the predictions the local predictions'.
"""

import json
import pathlib
import signal
import time

import pytest

import gcs_server
import in_process
import outputs
import scaleout

BUCKET = "images"
FORBIDDEN = "locked"  # Answers 403 to everything: a permission error.


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """The server, with this module's environment pointing every client at it (restored afterwards)."""
    server = gcs_server.start(tmp_path_factory.mktemp("gcs"), forbidden=(FORBIDDEN,))
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in server.env().items():
                patch.setenv(name, value)
            server.create_bucket(BUCKET)
            yield server
    finally:
        server.stop()


def client():
    from google.cloud import storage

    return storage.Client(project="test-project")


def names(prefix):
    return sorted(blob.name for blob in client().list_blobs(BUCKET, prefix=prefix))


def upload(folder, prefix):
    """Every file under `folder` to gs://BUCKET/prefix/..., by relative path."""
    bucket = client().bucket(BUCKET)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            bucket.blob(f"{prefix}/{path.relative_to(folder).as_posix()}").upload_from_filename(str(path))


def download(prefix, folder):
    """Every object under gs://BUCKET/prefix/ into `folder` (folder markers skipped); returns `folder`."""
    for blob in client().list_blobs(BUCKET, prefix=f"{prefix}/"):
        if not blob.name.endswith("/"):
            target = folder / blob.name[len(prefix) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            blob.download_to_filename(str(target))
    return folder


@pytest.fixture(scope="module")
def gs_run(gcs, small_run, tmp_path_factory):
    """small_run's list and images on gs://, its job into gs://BUCKET/out: killed once a shard is done while an
    image's read is held (so it cannot have finished), then the same command again, in this process."""
    upload(small_run.folder / "images", "data/images")
    client().bucket(BUCKET).blob("data/images.csv").upload_from_filename(str(small_run.csv_path))
    out = f"gs://{BUCKET}/out"
    command = scaleout.job_command(f"gs://{BUCKET}/data/images.csv", out, *scaleout.small_step_flags(small_run.folder),
                                   *in_process.IN_MEMORY)
    # Image downloads after the third wait: one worker writes shards one by one, so a first one finishes.
    gcs.control("hold", match=f"/download/storage/v1/b/{BUCKET}/o/data/images/", allowed=3)
    process = scaleout.start_command(command, cwd=small_run.folder)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if gcs.control("held")["held"] and names("out/shards/"):
                break
            time.sleep(0.2)
        scaleout.signal_group(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        gcs.control("release")
    killed = {"finished": [n for n in names("out/shards/") if n.endswith(".json")], "objects": names("out/")}
    resumed = in_process.run_module("beam_pipeline", *command[3:], cwd=small_run.folder)
    return out, killed, resumed


def test_a_killed_gs_run_resumes_to_the_local_runs_bytes(gs_run, small_run, tmp_path):
    out, killed, resumed = gs_run
    assert 0 < len(killed["finished"]) < 11, killed["finished"]
    assert "out/manifest.json" not in killed["objects"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resuming:" in resumed.stderr
    # The killed run's lock: its host is this one and its pid is gone, so it is taken over (docs: the run lock).
    assert "taking over the lock of a run that is gone" in resumed.stderr
    assert out in resumed.stdout
    local_copy = download("out", tmp_path / "out")
    manifest = json.loads((local_copy / "manifest.json").read_text())
    assert manifest["config"]["input_csv"] == f"gs://{BUCKET}/data/images.csv"
    manifest["config"]["input_csv"] = str(small_run.csv_path)  # The one setting that differs, by design,
    (local_copy / "manifest.json").write_text(json.dumps(manifest))
    [error] = outputs.errors(local_copy)  # and the missing object's full path.
    assert (error["reason"], error["detail"]) == ("file_not_found", f"gs://{BUCKET}/data/{scaleout.MISSING}")
    error["detail"] = outputs.errors(small_run.local)[0]["detail"]
    (local_copy / "errors.jsonl").write_text(json.dumps(error) + "\n")
    outputs.assert_same_output(small_run.local, local_copy)  # Same shard bytes: the stored pixels are equal.
    outputs.assert_every_shard_reads_to_its_end(local_copy)
    leftover = [name for name in names("out/") if ".incomplete" in name or name.startswith("out/.tmp/")]
    assert not leftover, leftover


def test_inspect_reads_the_gs_run(gs_run, small_run):
    out, _, _ = gs_run
    here = in_process.run_module("beam_pipeline", "inspect", out, "--format", "json")
    local = in_process.run_module("beam_pipeline", "inspect", str(small_run.local), "--format", "json")
    assert here.returncode == 0, here.stderr[-2000:]
    first, second = json.loads(here.stdout), json.loads(local.stdout)
    for key in ("rows", "written", "failed", "splits", "statistics"):
        assert first[key] == second[key], key


def test_the_reader_reads_the_gs_run_through_tensorflows_own_client(gs_run, small_run, gcs):
    import numpy as np

    from tf_serving_input.reader import make_dataset

    out, _, _ = gs_run

    def batches(output_dir):
        return [(images.numpy(), labels.numpy())
                for images, labels in make_dataset(output_dir, "train", batch_size=4, training=False)]

    here, local = batches(out), batches(str(small_run.local))
    assert len(here) == len(local) and sum(len(labels) for _, labels in here) == 9
    for (images, labels), (want_images, want_labels) in zip(here, local, strict=True):
        np.testing.assert_array_equal(images, want_images)
        np.testing.assert_array_equal(labels, want_labels)
    # Through TensorFlow's client (the proxied HTTPS names), not Beam's: shards and transform_fn.
    log = gcs.log()
    assert f"tls GET /{BUCKET}/out%2Fdata%2Ftrain-" in log and "out%2Ftransform_fn%2Fsaved_model.pb" in log


def test_predict_with_the_export_on_gs_and_quality_read_the_gs_run(gs_run, small_run, small_predictions, tmp_path):
    out, _, _ = gs_run
    export, local_predictions = small_predictions
    upload(pathlib.Path(export), "export")
    predicted = in_process.predict(*scaleout.predict_command(f"gs://{BUCKET}/export", out,
                                                             f"gs://{BUCKET}/pred")[3:])
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    here = download("pred", tmp_path / "pred")
    rows, want = outputs.prediction_rows(here), outputs.prediction_rows(local_predictions)
    # Every column the same but `path`, which names where the image was read.
    assert rows.pop("path") == [path.replace(str(small_run.folder), f"gs://{BUCKET}/data") for path in want.pop("path")]
    assert rows == want
    for key in ("rows", "predicted", "failed", "splits", "failed_by_reason"):
        assert outputs.manifest(here)[key] == outputs.manifest(local_predictions)[key], key

    quality = in_process.run_module("beam_pipeline.quality", "--input_dir", out, "--output_dir",
                                    f"gs://{BUCKET}/quality", "--no_progress", "--format", "json")
    assert quality.returncode == 0, quality.stderr[-3000:]
    summary = json.loads(download("quality", tmp_path / "quality").joinpath("summary.json").read_text())
    assert summary["images"] == 12
    assert {"out/manifest.json", "quality/report.html", "quality/clean_split.csv"} <= set(names(""))


def test_overwrite_on_gs_removes_the_earlier_runs_folders(gcs):
    """An object store has no folders, only name prefixes: `--overwrite` and a resume must still find and remove
    data/, shards/, transform_fn/ and .tmp/ (once, an earlier run's shards stayed beside the new ones)."""
    from beam_pipeline.common import output_dir
    from tf_serving_input.layout import OutputLayout

    bucket = client().bucket(BUCKET)
    earlier = ["data/train-00000-of-00009.tfrecord", "shards/train-00000-of-00009.json", "transform_fn/saved_model.pb",
               ".tmp/tftransform_tmp/x/saved_model.pb", "manifest.json"]
    for name in earlier:
        bucket.blob(f"overwritten/{name}").upload_from_string(b"earlier")
    bucket.blob("overwritten/run.json").upload_from_string(json.dumps({"another": "run"}))
    layout = OutputLayout(f"gs://{BUCKET}/overwritten")
    listed = r"\(data, shards, transform_fn, manifest.json, run.json, .tmp\)"
    with pytest.raises(output_dir.OutputDirError, match=listed):
        output_dir.prepare(layout, {"this": "run"}, overwrite=False)
    assert output_dir.prepare(layout, {"this": "run"}, overwrite=True) == 0
    assert names("overwritten/") == ["overwritten/run.json"]


@pytest.fixture
def endpoint_with_password(gcs, monkeypatch):
    """STORAGE_EMULATOR_HOST with user:password@ in it: a password that must never be shown or written."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url.replace("http://", f"http://tester:{SECRET}@"))
    return SECRET


SECRET = "s3cret-endpoint-pw"


def test_a_row_in_a_missing_bucket_a_missing_object_and_a_forbidden_bucket_fail_by_reason(endpoint_with_password):
    from beam_pipeline.inputs.rows import read_image_bytes
    from tf_serving_input import failures

    found = {}
    for path in (f"gs://no-such-bucket/{scaleout.MISSING}", f"gs://{BUCKET}/{scaleout.MISSING}",
                 f"gs://{FORBIDDEN}/a.png"):
        with pytest.raises(failures.RowFailure) as failure:
            read_image_bytes(path)
        found[path] = failure.value.reason, failure.value.detail
    assert [reason for reason, _ in found.values()] == ["file_not_found", "file_not_found", "permission_denied"]
    for path, (_, detail) in found.items():
        assert detail.startswith(path) and "\n" not in detail and "127.0.0.1" not in detail, detail
        assert SECRET not in detail


def test_a_missing_or_forbidden_bucket_is_one_line_before_any_work(endpoint_with_password, small_run):
    """--output_dir in a bucket that does not exist or refuses the credentials, and a job folder there: exit 2,
    one line naming the folder and the cause, nothing written, the endpoint's password never shown."""
    said = {}
    for bucket in ("no-such-bucket", FORBIDDEN):
        job = in_process.run_module("beam_pipeline", *scaleout.job_command(small_run.csv_path, f"gs://{bucket}/out")[3:])
        inspected = in_process.run_module("beam_pipeline", "inspect", f"gs://{bucket}/out")
        predicted = in_process.predict("--model_dir", f"gs://{bucket}/export", "--input_dir", f"gs://{bucket}/out",
                                       "--output_dir", f"gs://{bucket}/pred", "--database", "none")
        for name, result in (("job", job), ("inspect", inspected), ("predict", predicted)):
            # The predict job reads its export before it looks at --output_dir: a refused read fails the run (1).
            assert result.returncode == (1 if (bucket, name) == (FORBIDDEN, "predict") else 2), (name, result.stderr)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: "), (name, result.stderr[-2000:])
            assert SECRET not in result.stdout + result.stderr and "Traceback" not in result.stderr
            said[bucket, name] = lines[0]
    assert "--output_dir gs://no-such-bucket/out: the bucket does not exist" in said["no-such-bucket", "job"]
    assert f"--output_dir gs://{FORBIDDEN}/out: the object store refused the credentials in use (HTTP 403)" in said[
        FORBIDDEN, "job"]
    assert f"gs://{FORBIDDEN}/out/manifest.json: the object store refused the credentials" in said[FORBIDDEN, "inspect"]
    assert said[FORBIDDEN, "predict"].startswith("error: the object store refused the credentials in use (HTTP 403) "
                                                 f"while reading the export gs://{FORBIDDEN}/export; grant them")
    assert names("out/").count("out/.lock") == 0
