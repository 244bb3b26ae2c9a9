"""Flagged images: the per-image numbers of the signals against the thresholds (documented flags)."""

from __future__ import annotations

import dataclasses

import numpy as np

FLAGS = ("near_constant", "dark", "bright", "blurry")


@dataclasses.dataclass(frozen=True)
class HealthThresholds:
    """When an image is flagged; gray levels are 0-255 (see README "Quality")."""

    near_constant_contrast: float = 4.0  # Gray standard deviation below this: one flat colour (or nearly).
    dark_brightness: float = 30.0  # Mean gray level below this.
    bright_brightness: float = 225.0  # Mean gray level above this.
    blur_variance: float = 30.0  # Variance of the Laplacian below this (and not near-constant: flat is not blur).


def image_flags(brightness: np.ndarray, contrast: np.ndarray, blur: np.ndarray,
                thresholds: HealthThresholds) -> list[list[str]]:
    """Each image's flags (names from FLAGS, in that order); [] for a healthy image."""
    near_constant = contrast < thresholds.near_constant_contrast
    columns = {
        "near_constant": near_constant,
        "dark": brightness < thresholds.dark_brightness,
        "bright": brightness > thresholds.bright_brightness,
        "blurry": (blur < thresholds.blur_variance) & ~near_constant,
    }
    stacked = np.stack([columns[name] for name in FLAGS], axis=1)
    return [[name for name, on in zip(FLAGS, row, strict=True) if on] for row in stacked.tolist()]
