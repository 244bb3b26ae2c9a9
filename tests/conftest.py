"""Shared fixtures. Tests run on tiny images they generate, plus the bundled sample photos."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO_ROOT, "sample_data")


@pytest.fixture(scope="session")
def sample_photos():
    """A few real photographs from the bundled sample dataset: (path, label)."""
    return [(os.path.join(SAMPLE_DIR, "images", label, name), label) for label, name in
            [("cat", "cat_000.jpg"), ("coffee", "coffee_007.png"), ("astronaut", "astronaut_003.jpg"),
             ("rocket", "rocket_011.jpg")]]


@pytest.fixture(scope="session")
def tiny_job(tmp_path_factory):
    """A finished job output made in this process (16 px, JPEG storage): (output_dir, image folder, rows).

    12 small JPEG/PNG images in 3 classes, train and validation. The job runs on the
    in-process runner (no worker processes), so in-process tests can use a real output.
    """
    import numpy as np

    import imaging
    from beam_pipeline.preprocess import cli as main

    folder = tmp_path_factory.mktemp("tiny_job")
    rng = np.random.default_rng(2)
    rows = []
    for i in range(12):
        label = ("cat", "dog", "bird")[i % 3]
        image = imaging.quadrants(int(rng.integers(20, 40)), int(rng.integers(20, 40)))
        image[..., i % 3] = 40 * (i % 6)
        name = f"img{i}.png" if i % 2 else f"img{i}.jpg"
        (folder / name).write_bytes(imaging.encode(image, "PNG" if i % 2 else "JPEG"))
        rows.append([name, label, "validation" if i % 4 == 0 else "train"])
    imaging.write_csv(folder / "in.csv", ["path", "label", "split"], rows)
    out = folder / "out"
    code = main.run(["--input_csv", str(folder / "in.csv"), "--output_dir", str(out), "--image_size", "16",
                     "--image_format", "jpeg", "--num_shards", "2", "--no_progress", "--direct_num_workers", "1",
                     "--direct_running_mode", "in_memory"])
    assert code == 0
    return str(out), folder, rows
