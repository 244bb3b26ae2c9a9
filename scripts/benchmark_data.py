"""The benchmark's images: ImageNet-like JPEGs made from real photographs, fetched with pip when needed.

The photographs are the colour photos shipped inside the scikit-image and scikit-learn wheels
(astronaut, cat, coffee, rocket, motorcycles, Hubble deep field, retina, tissue; China, flower),
downloaded with `pip download` into the work folder the first time (nothing is committed). Each
benchmark image is a random 4:3 crop of one, resized to ~500x375 with a little sensor-like noise and
saved as JPEG q95: ~100-110 KiB on average, like ImageNet's validation photos (~110 KiB at ~500x375),
whose entropy is what makes decoding cost what it costs.
"""

import glob
import os
import subprocess
import sys
import zipfile

import numpy as np
from PIL import Image

WHEELS = ("scikit-image==0.25.2", "scikit-learn==1.7.2")
PHOTOS = ("skimage/data/astronaut.png", "skimage/data/chelsea.png", "skimage/data/coffee.png",
          "skimage/data/rocket.jpg", "skimage/data/motorcycle_left.png", "skimage/data/motorcycle_right.png",
          "skimage/data/hubble_deep_field.jpg", "skimage/data/retina.jpg", "skimage/data/ihc.png",
          "sklearn/datasets/images/china.jpg", "sklearn/datasets/images/flower.jpg")
NOISE_SIGMA = 9.0  # Sensor-like noise; with q95 it brings the average to ImageNet's ~110 KiB.
QUALITY = 95


def fetch_photos(folder):
    """The real photographs in `folder`, extracted from the wheels (downloaded with pip once); their paths."""
    photos = folder
    wanted = [os.path.join(photos, os.path.basename(name)) for name in PHOTOS]
    if all(os.path.exists(path) for path in wanted):
        return wanted
    wheels = os.path.join(folder, "wheels")
    os.makedirs(photos, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", wheels, *WHEELS], check=True)
    for wheel in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for name in set(archive.namelist()) & set(PHOTOS):
                with open(os.path.join(photos, os.path.basename(name)), "wb") as f:
                    f.write(archive.read(name))
    missing = [path for path in wanted if not os.path.exists(path)]
    if missing:
        raise RuntimeError(f"the wheels {WHEELS} did not hold {missing}")
    return wanted


def make_images(folder, photos, count, seed, width_range, label_by="photo"):
    """`count` JPEGs: random 4:3 crops of the photos, resized to a width in `width_range`, noise, q95.

    Returns [(path, label)] in class folders (as image_dataset_from_directory wants them); the label
    is the photo's name. Reuses files already there.
    """
    rng = np.random.default_rng(seed)
    sources = [(os.path.splitext(os.path.basename(path))[0], path) for path in photos]
    opened = {}
    result = []
    for i in range(count):
        label, source = sources[i % len(sources)]
        path = os.path.join(folder, label, f"{i:06d}.jpg")
        result.append((path, label))
        width = int(rng.integers(*width_range))
        fraction, corner_x, corner_y = rng.uniform(0.6, 1.0), rng.uniform(), rng.uniform()
        if os.path.exists(path):
            continue
        image = opened.setdefault(source, Image.open(source).convert("RGB"))
        crop_width = int(min(image.width, image.height / 0.75) * fraction)
        crop_height = int(crop_width * 0.75)
        left = int(corner_x * (image.width - crop_width))
        top = int(corner_y * (image.height - crop_height))
        height = int(width * 0.75)
        crop = image.crop((left, top, left + crop_width, top + crop_height)).resize(
            (width, height), Image.Resampling.BICUBIC)
        pixels = np.asarray(crop, np.float32) + np.random.default_rng(seed * 1_000_003 + i).normal(
            0.0, NOISE_SIGMA, (height, width, 3))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=QUALITY)
    return result
