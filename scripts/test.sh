#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite: scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "[test]"
exec .venv/bin/python -m pytest tests "$@"
