"""Shared fixtures. Tests run on tiny images they generate, plus the bundled sample photos."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

TESTS_DIR = pathlib.Path(__file__).resolve().parent
# Every test in these folders is slow (real command lines in subprocesses, scale-out runners):
# marked here by its folder, so no file can forget its mark. Elsewhere tests are in-process.
SLOW_FOLDERS = ("end_to_end", "scale_out")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO_ROOT, "sample_data")


@pytest.hookimpl(tryfirst=True)  # Before `-m "not slow"` deselects by marker.
def pytest_collection_modifyitems(config, items):
    """Marks every test under SLOW_FOLDERS slow."""
    for item in items:
        if pathlib.Path(str(item.path)).resolve().relative_to(TESTS_DIR).parts[0] in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


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
