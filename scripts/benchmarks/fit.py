"""fit_reader_vs_arrays, fit_cached_jpeg_vs_arrays, fit_accuracy_difference: training through the reader.

The same seeded small CNN (two convolutions, ~0.4 M weights) is trained for EPOCHS epochs, batches of
BATCH, on a small-image dataset written by the job at 28 px: TRAIN random crops of the bundled sample
photos (4 classes), VALIDATION more for accuracy. Each repetition fits, in this order:
- 'arrays': `model.fit` on NumPy arrays in memory (read once from the job's output), shuffled by Keras;
- 'reader': `make_dataset(training=True, augment=False)` over the job's default (raw) storage;
- 'reader, JPEG, cache': the same over a JPEG-storage run, with `cache=True` (decoded once, then kept).
Both readers see exactly the work the arrays see: augmentation is off. Each fit is timed from the call
to its end (the dataset is built before, as a user builds it once). Ratios: images/s of a reader fit /
images/s of the arrays fit of the same repetition; and the largest validation accuracy difference.
"""

import os

import numpy as np

from benchmarks.data import sample_photos
from benchmarks.harness import in_turn
from benchmarks.job import run_job

EPOCHS, BATCH, SIZE = 3, 64, 28
TRAIN, VALIDATION = 30_000, 6_000


def make_images(work):
    """TRAIN + VALIDATION 28 px JPEGs (square crops of 15-40% of a sample photo's side, half mirrored)
    and their job CSV; files already there are reused. Small crops keep validation accuracy below 1."""
    import csv

    from PIL import Image

    folder = os.path.join(work, "images_fit")
    csv_path = os.path.join(work, "fit.csv")
    sources = sample_photos()
    opened = {}
    rng = np.random.default_rng(4)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "label", "split"])
        for i in range(TRAIN + VALIDATION):
            label, source = sources[int(rng.integers(len(sources)))]
            fraction, corner_x, corner_y, mirrored = rng.uniform(0.15, 0.4), rng.uniform(), rng.uniform(), rng.uniform()
            path = os.path.join(folder, f"{i // 1000:03d}", f"{i:06d}.jpg")
            writer.writerow([path, label, "train" if i < TRAIN else "validation"])
            if os.path.exists(path):
                continue
            if source not in opened:
                opened[source] = Image.open(source).convert("RGB")
            image = opened[source]
            side = int(min(image.size) * fraction)
            left, top = int(corner_x * (image.width - side)), int(corner_y * (image.height - side))
            crop = image.crop((left, top, left + side, top + side)).resize((SIZE, SIZE), Image.Resampling.BOX)
            if mirrored < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            crop.save(path + ".tmp", "JPEG", quality=90)
            os.replace(path + ".tmp", path)  # A run cut short leaves no half-written image to reuse.
    return csv_path


def _model(classes):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((SIZE, SIZE, 3)),
        keras.layers.Conv2D(32, 3, activation="relu", padding="same"), keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu", padding="same"), keras.layers.MaxPooling2D(),
        keras.layers.Flatten(), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _arrays(out, split):
    from tf_serving_input.reader import make_dataset

    images, labels = [], []
    for batch_images, batch_labels in make_dataset(out, split, batch_size=1024, training=False):
        images.append(batch_images.numpy())
        labels.append(batch_labels.numpy())
    return np.concatenate(images), np.concatenate(labels)


def measure(bench):
    """The three figures, on the section's own dataset (made and preprocessed on the first call)."""
    import time

    from tf_serving_input.reader import make_dataset

    csv_path = make_images(bench.work)
    outs = {"raw": os.path.join(bench.work, "out_fit"), "jpeg": os.path.join(bench.work, "out_fit_jpeg")}
    run_job(csv_path, outs["raw"], "--image_size", str(SIZE))
    run_job(csv_path, outs["jpeg"], "--image_size", str(SIZE), "--image_format", "jpeg")
    train_images, train_labels = _arrays(outs["raw"], "train")
    validation = _arrays(outs["raw"], "validation")
    classes = int(train_labels.max()) + 1
    dropped = len(train_labels) // BATCH * BATCH

    def fit(data, images_per_epoch, **fit_kwargs):
        model = _model(classes)
        started = time.perf_counter()
        model.fit(*data, epochs=EPOCHS, verbose=0, **fit_kwargs)
        seconds = time.perf_counter() - started
        return images_per_epoch * EPOCHS / seconds, float(model.evaluate(*validation, batch_size=1024, verbose=0)[1])

    def reader(out, **kwargs):
        return make_dataset(out, "train", batch_size=BATCH, training=True, augment=False, seed=0, **kwargs)

    def log(repetition, sample):
        bench.results.say(f"   [fit {repetition + 1}/{bench.repetitions}] " + ", ".join(
            f"{name} {rate:.0f} img/s (accuracy {accuracy:.4f})" for name, (rate, accuracy) in sample.items()))

    samples = in_turn(bench.repetitions, {
        "arrays": lambda _: fit((train_images, train_labels), len(train_labels), batch_size=BATCH, shuffle=True),
        # Training readers drop the last partial batch: they see fewer images per epoch.
        "reader": lambda _: fit((reader(outs["raw"]),), dropped),
        "reader, JPEG, cache": lambda _: fit((reader(outs["jpeg"], cache=True),), dropped)}, log)
    bench.results.say(f"10. fit through the reader vs from arrays in memory: a small CNN, {EPOCHS} epochs, "
                      f"{TRAIN:,} {SIZE} px images, batches of {BATCH}:")
    title = f"{SIZE} px, {TRAIN // 1000}k"

    def over_arrays(name):
        return [subject[0] / arrays[0] for subject, arrays in zip(samples[name], samples["arrays"])]

    bench.results.ratio("fit_reader_vs_arrays", title, over_arrays("reader"))
    bench.results.ratio("fit_cached_jpeg_vs_arrays", title, over_arrays("reader, JPEG, cache"))
    bench.results.ratio("fit_accuracy_difference", title, [
        max(abs(samples[name][repetition][1] - samples["arrays"][repetition][1])
            for name in ("reader", "reader, JPEG, cache")) for repetition in range(bench.repetitions)])
    for name, values in samples.items():
        bench.results.rate(f"fit, {name}", [rate for rate, _ in values])
