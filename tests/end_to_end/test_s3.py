"""Images on object storage (s3://), through the real command line, against moto's S3 server.

Beam's S3 filesystem is configured from pipeline options (--s3_endpoint_url,
credentials, region): the launcher (which reads the CSV before any pipeline
exists) and the runner's worker processes (which read the images) must both get
them. TensorFlow's file system, which tensorflow-transform writes with, has no
s3://, so an s3:// --output_dir is refused up front.
"""

import sys

import boto3
import pytest

import imaging
import in_process
import outputs
import scaleout

BUCKET = "images"
ACCESS_KEY, SECRET_KEY, REGION = "testing", "testing", "us-east-1"


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    """URL of a moto S3 server on a free localhost port."""
    folder = tmp_path_factory.mktemp("moto")
    port = scaleout.free_port()
    server = scaleout.start_server([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   port, folder / "moto.log", cwd=folder)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        scaleout.stop_server(server)


@pytest.fixture(scope="module")
def s3(s3_endpoint):
    client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id=ACCESS_KEY,
                          aws_secret_access_key=SECRET_KEY, region_name=REGION)
    client.create_bucket(Bucket=BUCKET)
    return client


def s3_flags(endpoint):
    return [f"--s3_endpoint_url={endpoint}", f"--s3_access_key_id={ACCESS_KEY}",
            f"--s3_secret_access_key={SECRET_KEY}", f"--s3_region_name={REGION}"]


@pytest.fixture(scope="module")
def uploaded(s3, tmp_path_factory):
    """The small dataset's images under s3://BUCKET/photos/; returns [(relative name, label, split)]."""
    folder = tmp_path_factory.mktemp("s3_images")
    _, rows = scaleout.make_small_dataset(folder, count=6)
    for name, _, _ in rows:
        if name != scaleout.MISSING:
            s3.put_object(Bucket=BUCKET, Key=f"photos/{name}", Body=(folder / name).read_bytes())
    return rows


def check_output(out, sources):
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["written"], manifest["failed"]) == (len(sources), len(sources) - 1, 1)
    assert manifest["failed_by_reason"] == {"file_not_found": 1}
    errors = outputs.errors(out)
    assert [(e["source"], e["reason"]) for e in errors] == [(sources[-1], "file_not_found")]
    written = sorted(key for keys in outputs.keys_by_shard(out).values() for key in keys)
    assert len(written) == len(sources) - 1
    assert manifest["statistics"]["label_vocabulary"] and len(manifest["statistics"]["pixel_mean"]) == 3


def test_local_csv_of_s3_uris_with_a_missing_key(s3_endpoint, uploaded, tmp_path):
    rows = [[f"s3://{BUCKET}/photos/{name}", label, split] for name, label, split in uploaded]
    imaging.write_csv(tmp_path / "s3.csv", ["path", "label", "split"], rows)
    out = tmp_path / "out"
    # A worker process reads S3 (one: a second imported TensorFlow again, ~10 s).
    result = scaleout.run_job(tmp_path / "s3.csv", out, *s3_flags(s3_endpoint), "--direct_num_workers", "1")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    check_output(out, [row[0] for row in rows])


def test_csv_on_s3_with_paths_relative_to_it(s3_endpoint, s3, uploaded, tmp_path):
    """The launcher itself reads the CSV from S3: it needs the S3 options before the pipeline exists."""
    imaging.write_csv(tmp_path / "relative.csv", ["path", "label", "split"], uploaded)
    s3.put_object(Bucket=BUCKET, Key="photos/relative.csv", Body=(tmp_path / "relative.csv").read_bytes())
    out = tmp_path / "out"
    # In this process (tests/in_process.py); the test above runs the job's worker processes against S3.
    result = in_process.run_module("beam_pipeline", *scaleout.job_command(f"s3://{BUCKET}/photos/relative.csv", out,
                                                                          *s3_flags(s3_endpoint))[3:])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    check_output(out, [row[0] for row in uploaded])


@pytest.mark.parametrize("flag", ["--output_dir", "--temp_location"])
def test_output_tensorflow_cannot_write_is_refused_up_front(s3_endpoint, s3, uploaded, tmp_path, flag):
    rows = [[f"s3://{BUCKET}/photos/{name}", label, split] for name, label, split in uploaded]
    imaging.write_csv(tmp_path / "s3.csv", ["path", "label", "split"], rows)
    target = f"s3://{BUCKET}/refused/{flag.strip('-')}"
    out = target if flag == "--output_dir" else tmp_path / "out"
    extra = [] if flag == "--output_dir" else [f"--temp_location={target}"]
    before = s3.list_objects_v2(Bucket=BUCKET).get("KeyCount")
    result = in_process.run_module("beam_pipeline", *scaleout.job_command(tmp_path / "s3.csv", out,
                                                                          *s3_flags(s3_endpoint), *extra)[3:])
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"error: {flag} {target}: tensorflow-transform" in result.stderr
    assert "cannot write s3://" in result.stderr and "gs://" in result.stderr
    assert "Traceback" not in result.stderr
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == before  # Nothing written.
    assert not (tmp_path / "out").exists()
