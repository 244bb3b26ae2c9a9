"""An example Python step for --image_step (docs/steps.md): each image cropped to its largest face.

    pip install "beam-image-pipeline[opencv]"     # OpenCV, with its Haar cascades inside the wheel
    beam-image-pipeline preprocess ... --image_step sample_data/steps/face_crop.py:face_crop

OpenCV's frontal-face Haar cascade is loaded once per worker process (the
step's set-up), then each image is cropped to its largest face with a margin of
a quarter of the face's size on each side; an image without a face passes on
unchanged. OpenCV is imported at the top: without it, the job refuses the step
before any work, naming this file.
"""

import cv2
import numpy as np

from beam_pipeline import python_step

MARGIN = 0.25  # Of the face's width and height, kept on each side.


def load_cascade():
    """The set-up, once per worker process: the cascade that ships inside the opencv-python(-headless) wheel."""
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    if cascade.empty():
        raise RuntimeError(f"OpenCV's face cascade is missing from {cv2.data.haarcascades}")
    return cascade


@python_step(setup=load_cascade)
def face_crop(image, cascade):
    """uint8 [H, W, 3] RGB -> the crop around its largest face (uint8 [h, w, 3]), or the image when it has none."""
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    smallest = max(24, min(gray.shape) // 8)  # Faces under 1/8 of the image are left alone.
    faces = cascade.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=5, minSize=(smallest, smallest))
    if len(faces) == 0:
        return image
    x, y, width, height = max(faces, key=lambda face: int(face[2]) * int(face[3]))
    margin_x, margin_y = int(width * MARGIN), int(height * MARGIN)
    top, left = max(0, y - margin_y), max(0, x - margin_x)
    bottom, right = min(image.shape[0], y + height + margin_y), min(image.shape[1], x + width + margin_x)
    return np.array(image[top:bottom, left:right])  # A new array: the image the step gets is read-only.
