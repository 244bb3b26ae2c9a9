#!/usr/bin/env bash
# Sets up .venv if needed, runs the Beam job on the bundled sample dataset into
# output/sample and shows what it wrote (summary + contact sheet).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
CSV=sample_data/sample.csv
OUT=output/sample
if [ ! -f "$CSV" ]; then
  echo "error: $CSV is missing; regenerate it with: pip install scikit-image && python scripts/make_sample_data.py" >&2
  exit 2
fi
echo "Sample dataset: $(($(wc -l < "$CSV") - 1)) images listed in $CSV"
without_startup_noise .venv/bin/python -m beam_pipeline --input_csv "$CSV" --output_dir "$OUT" --overwrite "$@"
without_startup_noise .venv/bin/python -m beam_pipeline.inspect "$OUT" --contact_sheet "$OUT/contact_sheet.png"
# Then the rest of the path: train on the output, export for serving, serve one raw image.
without_startup_noise .venv/bin/python scripts/train.py --output_dir "$OUT" --export_dir "$OUT/serving_model" \
    --predict_image sample_data/images/cat/cat_000.jpg
