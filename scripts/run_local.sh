#!/usr/bin/env bash
# Sets up .venv if needed, runs the Beam job on the bundled sample dataset into output/sample and
# shows what it wrote (summary + contact sheet), trains and exports a classifier, then runs the
# predict job over every image into an embedded PostgreSQL + pgvector (data in output/postgres) and
# searches it once (contact sheet in output/sample/search.png); then the quality job on the sample output
# (duplicate groups, cross-split leaks, a clean split and output/sample_quality/report.html); ends with the
# command that opens the web UI.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
CSV=sample_data/sample.csv
OUT=output/sample
if [ ! -f "$CSV" ]; then
  echo "error: $CSV is missing; regenerate it with: pip install scikit-image && python scripts/make_sample_data.py" >&2
  exit 2
fi
echo "Sample dataset: $(($(wc -l < "$CSV") - 1)) images listed in $CSV"
.venv/bin/beam-image-pipeline preprocess --input_csv "$CSV" --output_dir "$OUT" --overwrite "$@"
.venv/bin/beam-image-pipeline inspect "$OUT" --contact_sheet "$OUT/contact_sheet.png"
# Then the rest of the path: train on the output, export for serving, serve one raw image. Run again on the same
# output, train.py keeps its export, so README's tour (and this script again) still fits the predictions below.
.venv/bin/python scripts/train.py --output_dir "$OUT" --export_dir "$OUT/serving_model" \
    --predict_image sample_data/images/cat/cat_000.jpg
# The second half: predictions and embeddings for every image, into the database, and a search.
# Arguments given to this script ("$@") can change the output, and then train.py trains a new model; a table
# never holds two exports' embeddings, so the demo's own table goes first and this script always runs again.
# (client_min_messages: the first run has no such table, and PostgreSQL's notice saying so is noise.)
.venv/bin/beam-image-pipeline db psql --database_dir output/postgres -q -c "SET client_min_messages = warning" \
    -c "DROP TABLE IF EXISTS sample" >/dev/null
.venv/bin/beam-image-pipeline predict --model_dir "$OUT/serving_model" --input_dir "$OUT" \
    --output_dir output/sample_predictions --database embedded --database_dir output/postgres --table sample \
    --overwrite
.venv/bin/beam-image-pipeline search --model_dir "$OUT/serving_model" \
    --database embedded --database_dir output/postgres --table sample \
    --image sample_data/images/cat/cat_000.jpg -k 8 --contact_sheet "$OUT/search.png"
echo "Query the database yourself: .venv/bin/beam-image-pipeline db psql --database_dir output/postgres"
# Dataset quality: the sample set is crops of four photographs, so many near-duplicate groups are expected,
# and some span train and validation (clean_split.csv moves them into one split).
echo "Dataset quality of $OUT (the sample images are crops of four photographs: expect many near-duplicates):"
.venv/bin/beam-image-pipeline quality --input_dir "$OUT" --output_dir output/sample_quality --overwrite
echo "Summary: output/sample_quality/summary.json; open the report offline: output/sample_quality/report.html"
echo "Browse the run in the web UI (on http://127.0.0.1:8080/, loopback only; Ctrl-C stops it):"
echo "  .venv/bin/beam-image-pipeline ui --input_dir $OUT --predictions_dir output/sample_predictions \\"
echo "      --model_dir $OUT/serving_model --database embedded --database_dir output/postgres --table sample \\"
echo "      --quality_dir output/sample_quality --open"
