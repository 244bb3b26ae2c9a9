"""The job's output bytes on the bundled sample set are exactly those recorded in tests/end_to_end/golden/.

The set is the first 64 rows of sample_data/sample.csv, copied with their relative
paths (paths and keys are part of the bytes) into a temporary folder; every storage format
at 32 px, and raw at 224 px.

Guards the output contract against unintended change: a refactoring, a new library
version or another machine that alters a single stored byte fails here, naming the
shard. For an intended change, regenerate: UPDATE_GOLDEN=1 pytest tests/end_to_end/test_golden.py
"""

import csv
import hashlib
import json
import os
import shutil

import pytest

import outputs
from beam_pipeline.preprocess import cli as main
from conftest import SAMPLE_DIR

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "sample_32px.json")
ROWS = 64


@pytest.fixture(scope="module")
def sample_subset(tmp_path_factory):
    """The first ROWS rows of the sample CSV and their images, same relative paths: the CSV's path."""
    folder = tmp_path_factory.mktemp("golden")
    with open(os.path.join(SAMPLE_DIR, "sample.csv"), newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[:ROWS + 1]
    for path, _, _ in rows[1:]:
        os.makedirs(folder / os.path.dirname(path), exist_ok=True)
        shutil.copy(os.path.join(SAMPLE_DIR, path), folder / path)
    with open(folder / "sample.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return folder / "sample.csv"


# At 32 px every sample photo shrinks by 2x or more (the triangle filter); at 224 px most shrink by
# less (the area filter, issue 39), so both filters' bytes are held.
@pytest.mark.parametrize("image_format,image_size", [("raw", 32), ("png", 32), ("jpeg", 32), ("raw", 224)])
def test_sample_set_output_bytes_match_the_golden_record(sample_subset, tmp_path, image_format, image_size):
    out = tmp_path / "out"
    # In this process, one worker: the bytes do not depend on the worker count (test_reliability).
    assert main.run(["--input_csv", str(sample_subset), "--output_dir", str(out), "--image_size", str(image_size),
                     "--image_format", image_format, "--no_progress", "--direct_num_workers", "1",
                     "--direct_running_mode", "in_memory"]) == 0
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in outputs.shard_bytes(out).items()}
    key = image_format if image_size == 32 else f"{image_format}_{image_size}px"
    with open(GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    if os.environ.get("UPDATE_GOLDEN"):
        golden["formats"][key] = digests
        with open(GOLDEN, "w", encoding="utf-8") as f:
            json.dump(golden, f, indent=1)
    expected = golden["formats"][key]
    assert sorted(digests) == sorted(expected)
    changed = [name for name in expected if digests[name] != expected[name]]
    assert not changed, f"{key} shards whose bytes changed: {changed}"
