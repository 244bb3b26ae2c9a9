# Sourced by the scripts: creates .venv at the repository root when missing and
# installs the project into it (with the extras given as "$1", e.g. "[test]").
# The install is editable, so code changes need no reinstall: pip runs again only when
# pyproject.toml, setup.py or the extras asked for change (a stamp in .venv records what was installed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The .pyc files of what the commands import, written by importing it once: uv writes none, and where
# PYTHONDONTWRITEBYTECODE is set (CI's machines) Python never would, so every process compiled TensorFlow and
# Beam anew (`import tensorflow, apache_beam` 8 s of CPU -> 21 s). uv's --compile-bytecode compiled all of
# site-packages instead (21,700 files, 70 s of the install, 121 s of CPU on 2 cores) for the ~5,400 modules the
# commands import (~27 s, once; a second call only imports). What only some runs import is compiled where it is
# first imported. scripts/test.sh sets BEAM_IMAGE_PIPELINE_COMPILE_LATER and runs this beside its fast lane.
compile_imports() {
  local said
  if ! said="$(env -u PYTHONDONTWRITEBYTECODE TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python -c "$(cat <<'PY'
import importlib
for name in ("beam_pipeline.preprocess.pipeline", "beam_pipeline.predict.pipeline",
             "beam_pipeline.quality.pipeline", "beam_pipeline.ui.app", "beam_pipeline.database.server",
             "tf_serving_input.reader", "tensorflow_transform.beam",
             "apache_beam.runners.portability.fn_api_runner.fn_runner",
             "apache_beam.runners.portability.portable_runner", "apache_beam.runners.worker.sdk_worker_main"):
    importlib.import_module(name)
PY
)" 2>&1)"; then
    printf '%s\n' "$said" >&2
    echo "error: the installed packages do not import (above); remove .venv and run this command again" >&2
    return 1
  fi
}
if [ ! -x .venv/bin/python ]; then
  PYTHON="${PYTHON:-}"
  if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3 python; do
      if command -v "$candidate" >/dev/null 2>&1 && \
         "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
        PYTHON="$candidate"; break
      fi
    done
  fi
  if [ -z "$PYTHON" ]; then
    echo "error: Python 3.11 is required (tensorflow-transform 1.21 supports it); set PYTHON=/path/to/python3.11" >&2
    exit 2
  fi
  echo "Creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
  # uv (from PyPI) installs the wheels in parallel from its own cache: a fresh .venv with the [test]
  # extra took 39 s with uv (cache empty, downloads included) against 203-210 s with pip
  # (docs/testing.md). pip, setuptools and wheel stay in .venv (test_sdist builds with --no-isolation).
  .venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel uv
fi
STAMP_FILE=.venv/beam-image-pipeline.installed
wanted="${1:-}"
project_sum="$(cat pyproject.toml setup.py | cksum | cut -d' ' -f1)"
stamp="$project_sum ${wanted:-[]}"
# Installed with these extras (or a superset: "[test]" includes everything "" needs) from this setup.py?
if [ -f "$STAMP_FILE" ] && { grep -qxF "$stamp" "$STAMP_FILE" || \
     { [ -z "$wanted" ] && grep -q "^$project_sum " "$STAMP_FILE"; }; }; then
  return 0 2>/dev/null || exit 0
fi
echo "Installing beam-image-pipeline${wanted} into .venv (first time: a minute or more)"
if [ -x .venv/bin/uv ]; then
  # --native-tls: the OS's certificates, as pip's (PIP_CERT); pip's find-links folder, if set, too.
  .venv/bin/uv pip install --quiet --native-tls --python .venv/bin/python \
      ${PIP_FIND_LINKS:+--find-links "$PIP_FIND_LINKS"} -e ".${wanted}"
  # uv writes no .pyc files: compile_imports below writes those of what the commands import.
  [ -n "${BEAM_IMAGE_PIPELINE_COMPILE_LATER:-}" ] || compile_imports
else  # a .venv made before uv was used here
  # setuptools' notes about editable installs are noise here; pip's errors still show.
  .venv/bin/python -m pip install --quiet -e ".${wanted}" 2> >(grep -v -e "BuildBackendWarning" \
    -e "^  *!!" -e "^  *\*\*\*" -e "Please be careful" -e "name as your package" -e "with strategy, WheelFile" \
    -e "^ *$" >&2)
fi
echo "$stamp" > "$STAMP_FILE"
