# Sourced by the scripts: creates .venv at the repository root when missing and
# installs the project into it (with the extras given as "$1", e.g. "[test]").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
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
  .venv/bin/python -m pip install --quiet --upgrade pip setuptools wheel
fi
echo "Installing beam-image-pipeline${1:-} into .venv (first time: a few minutes)"
.venv/bin/python -m pip install --quiet -e ".${1:-}"
