"""Shared fixtures. Tests run on tiny images they generate, plus the bundled sample photos."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(__file__))  # Makes tests/imaging.py importable.

import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO_ROOT, "sample_data")


@pytest.fixture(scope="session")
def sample_photos():
    """A few real photographs from the bundled sample dataset: (path, label)."""
    return [(os.path.join(SAMPLE_DIR, "images", label, name), label) for label, name in
            [("cat", "cat_000.jpg"), ("coffee", "coffee_007.png"), ("astronaut", "astronaut_003.jpg"),
             ("rocket", "rocket_011.jpg")]]
