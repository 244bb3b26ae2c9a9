"""Contact sheets: a PNG grid of images, each captioned, for a user to look at the data (Pillow only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def render_contact_sheet(samples: Sequence[tuple[np.ndarray[Any, Any], str, Any]], path: str,
                         columns: int = 8) -> None:
    """Writes a PNG grid of the sample images, each captioned with its label."""
    from PIL import Image, ImageDraw, ImageFont

    if not samples:
        raise ValueError("no images to render: the output has no written records")
    size = samples[0][0].shape[0]
    caption = 14
    rows = (len(samples) + columns - 1) // columns
    sheet = Image.new("RGB", (columns * (size + 4), rows * (size + caption + 4)), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default()
    for i, (image, label, _) in enumerate(samples):
        x = (i % columns) * (size + 4) + 2
        y = (i // columns) * (size + caption + 4) + 2
        sheet.paste(Image.fromarray(image), (x, y))
        draw.text((x, y + size + 1), label or "(unlabeled)", fill="black", font=font)
    sheet.save(path)
