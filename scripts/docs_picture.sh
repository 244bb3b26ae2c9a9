#!/usr/bin/env bash
# Regenerates docs/contact_sheet.png, the picture README.md shows: the preprocessing job on the bundled
# sample data (into output/docs_picture), then `inspect --contact_sheet`: the first images of its shards as
# the job stored them, each with its label. The same data and flags give the same picture.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
OUT=output/docs_picture
.venv/bin/beam-image-pipeline preprocess --input_csv sample_data/sample.csv --output_dir "$OUT" \
    --image_size 128 --overwrite --no_progress >/dev/null
.venv/bin/beam-image-pipeline inspect "$OUT" --contact_sheet docs/contact_sheet.png --samples 16 >/dev/null
echo "wrote docs/contact_sheet.png"
