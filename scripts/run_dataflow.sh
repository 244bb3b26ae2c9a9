#!/usr/bin/env bash
# Runs the job on Google Cloud Dataflow.
#
#   scripts/run_dataflow.sh --project PROJECT --region REGION --temp_location gs://BUCKET/tmp \
#       --input_csv gs://BUCKET/images.csv --output_dir gs://BUCKET/out [job flags] [Beam flags]
#
# Required: --project, --region, --temp_location (gs://: Beam's staging and tensorflow-transform's
# temporary files), and --input_csv / --output_dir on gs:// (workers read the CSV and the images
# and write the shards; relative image paths resolve against the CSV's gs:// folder).
# How workers get this project:
#   default                      --setup_file ./setup.py: Beam builds this project's sdist and every
#                                worker pip-installs it with its dependencies (TensorFlow included:
#                                slow worker start-up, but nothing to build first);
#   --sdk_container_image=IMAGE  an image built from ./Dockerfile (Beam's Python 3.11 SDK image with
#                                the project installed): fast start-up, recommended for big runs.
# Any other Beam/Dataflow option passes through (--max_num_workers, --machine_type, ...).
# Needs Google Cloud credentials (gcloud auth application-default login) and the Dataflow API.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
args=("$@")
value_of() {  # value_of FLAG: the value given as `FLAG=V` or `FLAG V`, empty when absent
  local i
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[$i]}" in
      "$1="*) echo "${args[$i]#"$1"=}"; return ;;
      "$1") echo "${args[$((i + 1))]:-}"; return ;;
    esac
  done
}
missing=()
for flag in --project --region --temp_location --input_csv --output_dir; do
  [ -n "$(value_of "$flag")" ] || missing+=("$flag")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "error: scripts/run_dataflow.sh needs ${missing[*]} (see scripts/run_dataflow.sh --help)" >&2
  exit 2
fi
for flag in --temp_location --input_csv --output_dir; do
  case "$(value_of "$flag")" in
    gs://*) ;;
    *) echo "error: $flag must be a gs:// path: Dataflow workers cannot see this machine's files" >&2
       exit 2 ;;
  esac
done
if [ -n "$(value_of --sdk_container_image)" ]; then
  # The image already holds the SDK and the project: stage neither.
  [ -n "$(value_of --sdk_location)" ] || args+=("--sdk_location=container")
elif [ -z "$(value_of --setup_file)" ]; then
  args+=("--setup_file=./setup.py")
fi
source "$(dirname "$0")/_venv.sh" ""
exec .venv/bin/python -m beam_pipeline --runner=DataflowRunner "${args[@]}"
