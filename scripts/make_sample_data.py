"""Regenerates the bundled sample dataset in sample_data/ (already committed; run only to change it).

Each class is one public-domain or CC0 photograph shipped inside the
scikit-image wheel (see sample_data/README.md for provenance and licenses).
Every sample is a different random crop, scale, flip and colour jitter of its
class's photo, saved mostly as JPEG with some PNGs, some EXIF-rotated JPEGs and
some grayscale images, so the sample exercises what real datasets contain.

    pip install scikit-image && python scripts/make_sample_data.py
"""

import argparse
import csv
import io
import os
import random

from PIL import Image, ImageEnhance, ImageOps

CLASSES = {  # label -> file in skimage/data
    "cat": "chelsea.png",
    "coffee": "coffee.png",
    "astronaut": "astronaut.png",
    "rocket": "rocket.jpg",
}
# Stored pixels are turned so that EXIF orientation 6 brings them back upright.
_STORE_FOR_ORIENTATION_6 = Image.Transpose.ROTATE_90


def _source_photo(name):
    import skimage

    path = os.path.join(os.path.dirname(skimage.__file__), "data", name)
    return Image.open(path).convert("RGB")


def _variant(photo, rng):
    width, height = photo.size
    area = width * height * rng.uniform(0.35, 1.0)
    aspect = rng.uniform(3 / 4, 4 / 3)
    crop_w = min(width, int(round((area * aspect) ** 0.5)))
    crop_h = min(height, int(round((area / aspect) ** 0.5)))
    left = rng.randint(0, width - crop_w)
    top = rng.randint(0, height - crop_h)
    image = photo.crop((left, top, left + crop_w, top + crop_h))
    longer = rng.randint(200, 400)
    scale = longer / max(image.size)
    image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                         Image.Resampling.LANCZOS)
    if rng.random() < 0.5:
        image = ImageOps.mirror(image)
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))
    image = ImageEnhance.Contrast(image).enhance(rng.uniform(0.8, 1.2))
    return ImageEnhance.Color(image).enhance(rng.uniform(0.7, 1.3))


def _encode(image, number, rng):
    """Returns (bytes, extension, kind) with a mix of encodings."""
    out = io.BytesIO()
    if number % 20 == 7:
        image.save(out, "PNG", optimize=True)
        return out.getvalue(), "png", "png"
    if number % 16 == 3:
        exif = Image.Exif()
        exif[0x0112] = 6
        image.transpose(_STORE_FOR_ORIENTATION_6).save(out, "JPEG", quality=88, exif=exif.tobytes())
        return out.getvalue(), "jpg", "jpeg, EXIF orientation 6"
    if number % 25 == 11:
        image.convert("L").save(out, "JPEG", quality=88)
        return out.getvalue(), "jpg", "grayscale jpeg"
    image.save(out, "JPEG", quality=rng.randint(80, 92), progressive=number % 9 == 0)
    return out.getvalue(), "jpg", "jpeg"


def main():
    """Writes sample_data/images/<label>/*.{jpg,png} and sample_data/sample.csv."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "sample_data"))
    parser.add_argument("--per_class", type=int, default=80)
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for label, file_name in CLASSES.items():
        photo = _source_photo(file_name)
        folder = os.path.join(args.out, "images", label)
        os.makedirs(folder, exist_ok=True)
        for number in range(args.per_class):
            data, extension, _ = _encode(_variant(photo, rng), number, rng)
            relative = f"images/{label}/{label}_{number:03d}.{extension}"
            with open(os.path.join(args.out, relative), "wb") as f:
                f.write(data)
            rows.append((relative, label, "validation" if number % 5 == 0 else "train"))
    rng.shuffle(rows)
    with open(os.path.join(args.out, "sample.csv"), "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    print(f"wrote {len(rows)} images and {os.path.join(args.out, 'sample.csv')}")


if __name__ == "__main__":
    main()
