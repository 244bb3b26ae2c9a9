"""Contact sheets: a PNG grid of images, each captioned, for a user to look at the data (Pillow only)."""


def render_contact_sheet(samples, path, columns=8):
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
