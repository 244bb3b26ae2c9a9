"""The whole job on Apache Flink (embedded cluster, Beam's Flink job server) equals the local runner's output.

Runs only where FLINK_JOB_SERVER_JAR names Beam's Flink job server jar:
`scripts/flink_integration_test.sh` fetches it with Maven and runs this file as a
separate step (it needs Java and a ~200 MB download once). Elsewhere it is skipped.
"""

import os
import re

import pytest

import scaleout

JAR = os.environ.get("FLINK_JOB_SERVER_JAR", "")

pytestmark = pytest.mark.skipif(
    not JAR, reason="FLINK_JOB_SERVER_JAR is not set: run scripts/flink_integration_test.sh")


def flink_version(jar):
    match = re.search(r"beam-runners-flink-(\d+\.\d+)-job-server", os.path.basename(jar))
    assert match, f"{jar} is not a Beam Flink job server jar"
    return match.group(1)


def test_embedded_flink_matches_the_local_runner(tmp_path):
    assert os.path.isfile(JAR), JAR
    csv_path, rows = scaleout.make_small_dataset(tmp_path)
    local, flink = tmp_path / "out_local", tmp_path / "out_flink"
    result = scaleout.run_job(csv_path, local)
    assert result.returncode == 0, result.stderr[-3000:]
    result = scaleout.run_job(csv_path, flink, "--runner=FlinkRunner", "--flink_master=[local]",
                              f"--flink_version={flink_version(JAR)}", f"--flink_job_server_jar={JAR}",
                              "--environment_type=LOOPBACK")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    manifest = scaleout.manifest(flink)
    assert manifest["runner"] == "FlinkRunner"
    assert (manifest["rows"], manifest["written"], manifest["failed"]) == (len(rows), len(rows) - 1, 1)
    scaleout.assert_same_output(local, flink)
