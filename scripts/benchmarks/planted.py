"""Planted near-duplicates made from the project's real images (sample_data/), for the accuracy checks.

Distinct pictures: disjoint tiles of one sample photo per class (the sample set itself is crops of four
photographs, so two sample images are often near-duplicates of each other; tiles that share no pixel are
not). Each planted variant applies one of the transformations the issue says must count as a duplicate.
"""

import glob
import io
import os

import numpy as np
from PIL import Image, ImageEnhance

SAMPLE_IMAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sample_data", "images")
CLASSES = ("astronaut", "cat", "coffee", "rocket")


def _encode(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def distinct_pictures(tiles_per_side=2, tile=150, photos_per_class=2):
    """[(name, PIL RGB image)]: disjoint tiles of the largest sample images, `photos_per_class` per class.

    Two photos of a class are crops of one photograph and may overlap, so only tiles of the first photo
    are used per class unless `photos_per_class` > 1, where the second photo's tiles come from its other
    corner (far from the first's); the precision test measures exactly whether such tiles collide.
    """
    pictures = []
    for label in CLASSES:
        paths = sorted(glob.glob(os.path.join(SAMPLE_IMAGES, label, "*.jpg")))
        sized = sorted(paths, key=lambda p: -np.prod(Image.open(p).size))[:photos_per_class]
        for photo_index, path in enumerate(sized):
            image = Image.open(path).convert("RGB")
            width, height = image.size
            for row in range(tiles_per_side):
                for column in range(tiles_per_side):
                    if tile * tiles_per_side > min(width, height):
                        continue
                    left, top = column * tile, row * tile
                    if photo_index % 2:  # From the bottom-right corner.
                        left, top = width - (column + 1) * tile, height - (row + 1) * tile
                    pictures.append((f"{label}{photo_index}_{row}{column}",
                                     image.crop((left, top, left + tile, top + tile))))
    return pictures


def _crop(image, area):
    width, height = image.size
    side = area ** 0.5
    new_w, new_h = round(width * side), round(height * side)
    left, top = (width - new_w) // 2, (height - new_h) // 3  # Off-centre: the crop is not symmetric.
    return image.crop((left, top, left + new_w, top + new_h))


def _resize(image, scale):
    width, height = image.size
    return image.resize((max(1, round(width * scale)), max(1, round(height * scale))), Image.BILINEAR)


# class -> [(variant name, PIL image -> encoded bytes)]
TRANSFORMS = {
    "exact_copy": [("copy", lambda im: _encode(im, "PNG"))],
    "format_change": [("jpeg_to_png", lambda im: _encode(Image.open(io.BytesIO(_encode(im, "JPEG", quality=90))),
                                                           "PNG"))],
    "jpeg_quality": [(f"q{q}", lambda im, q=q: _encode(im, "JPEG", quality=q)) for q in (60, 75, 95)],
    "resize": [(f"scale{s}", lambda im, s=s: _encode(_resize(im, s / 100), "PNG")) for s in (50, 75, 125, 150)],
    "crop": [(f"crop{a}", lambda im, a=a: _encode(_crop(im, a / 100), "PNG")) for a in (90, 95)],
    "brightness_contrast": [
        (f"{kind}{sign}{12}", lambda im, kind=kind, sign=sign: _encode(
            (ImageEnhance.Brightness if kind == "brightness" else ImageEnhance.Contrast)(im).enhance(
                1 + (0.12 if sign == "+" else -0.12)), "PNG"))
        for kind in ("brightness", "contrast") for sign in ("+", "-")],
}


def planted_set(pictures):
    """[(name, class or None, base name, encoded bytes)]: every base as PNG, then every variant of each."""
    items = [(name, None, name, _encode(image, "PNG")) for name, image in pictures]
    for name, image in pictures:
        for transform_class, variants in TRANSFORMS.items():
            for variant, make in variants:
                items.append((f"{name}__{variant}", transform_class, name, make(image)))
    return items


def stored_images(items, preprocess):
    """uint8 [N, S, S, 3]: each planted item through the job's preprocessing, stored and decoded by its codec."""
    import tensorflow as tf

    from tf_serving_input.codecs import codec_for, to_bytes
    from tf_serving_input.preprocessing import preprocess_image

    codec = codec_for(preprocess)
    out = []
    for _, _, _, data in items:
        image = preprocess_image(tf.constant(data), preprocess)
        stored = to_bytes(codec.encode(image, preprocess))
        out.append(codec.decode(tf.constant(stored), preprocess.image_size).numpy())
    return np.stack(out)


def accuracy(items, hashes, found_pairs):
    """Recall per transformation class and precision, from the pairs found (positions into `items`).

    A planted pair is (variant, its base); a found pair is true when both sides come from one base.
    Returns {"classes": {class: {"planted", "found", "recall"}}, "pairs", "false_pairs", "precision", "recall"}.
    """
    found = {(min(a, b), max(a, b)) for a, b in found_pairs}
    index = {name: i for i, (name, _, _, _) in enumerate(items)}
    classes = {}
    for i, (_, transform_class, base, _) in enumerate(items):
        if transform_class is None:
            continue
        pair = (min(i, index[base]), max(i, index[base]))
        entry = classes.setdefault(transform_class, {"planted": 0, "found": 0})
        entry["planted"] += 1
        entry["found"] += pair in found
    for entry in classes.values():
        entry["recall"] = entry["found"] / entry["planted"]
    false_pairs = sum(items[a][2] != items[b][2] for a, b in found)
    planted = sum(e["planted"] for e in classes.values())
    return {"classes": classes, "pairs": len(found), "false_pairs": false_pairs,
            "precision": (len(found) - false_pairs) / len(found) if found else 1.0,
            "recall": sum(e["found"] for e in classes.values()) / planted}
