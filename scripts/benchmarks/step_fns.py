"""The steps section's own steps (steps.py), loadable with --image_step FILE.py:FUNCTION.

Two Python steps of about 20-50 ms on a light-set photo (~500x375) on one core, at the two ends of
what Python steps do to threads, and a trivial TF step:

- `gil_equalize` (G): histogram equalization whose histogram is counted in a pure-Python loop over
  every byte, so it holds the GIL the whole time (the case tf.py_function cannot run in parallel);
- `numpy_blur` (R): a separable 15-tap Gaussian blur in float32 NumPy ufuncs on whole arrays, which
  release the GIL (the case a thread pool can run in parallel);
- `tf_identity`: a TF step that returns its input (what running a step costs the job, nothing more).

Each Python step takes NumPy uint8 [H, W, 3] and returns a new uint8 [H, W, 3] array (the image the
job passes is read-only). No TensorFlow import at module level: the Python steps do not need it.
"""

import numpy as np

from beam_pipeline import python_step

_TAPS = 15  # With the G loop, ~30-50 ms a 500x375 photo on one core of the 2-core benchmark machine.
_KERNEL = np.exp(-0.5 * ((np.arange(_TAPS) - _TAPS // 2) / (_TAPS / 6)) ** 2).astype(np.float32)
_KERNEL /= _KERNEL.sum()


@python_step
def gil_equalize(image):
    """(G) Per-channel-agnostic histogram equalization; the histogram is a Python loop over every byte."""
    counts = [0] * 256
    for value in image.tobytes():  # Pure Python: holds the GIL, one bytecode loop per byte.
        counts[value] += 1
    total, running, lut = image.size, 0, []
    for count in counts:
        running += count
        lut.append(min(255, (running * 256) // (total + 1)))
    return np.asarray(lut, np.uint8)[image]


def _blur_axis(pixels, axis):
    """One pass of the separable kernel along `axis` (0 rows, 1 columns), edges clamped."""
    half = _TAPS // 2
    pad = [(half, half) if a == axis else (0, 0) for a in range(3)]
    padded = np.pad(pixels, pad, mode="edge")
    out = np.zeros_like(pixels)
    length = pixels.shape[axis]
    for tap, weight in enumerate(_KERNEL):
        shifted = padded[tap:tap + length] if axis == 0 else padded[:, tap:tap + length]
        out += weight * shifted  # Whole-array float32 ufuncs: NumPy releases the GIL inside them.
    return out


@python_step
def numpy_blur(image):
    """(R) A separable Gaussian blur (15 taps a pass) in NumPy float32."""
    pixels = _blur_axis(_blur_axis(image.astype(np.float32), 0), 1)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def tf_identity(image):
    """A trivial TF step: the image unchanged (traced into the job's TensorFlow call)."""
    return image
