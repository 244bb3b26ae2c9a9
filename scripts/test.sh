#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite (what CI runs, through .ci/run):
#   scripts/test.sh [pytest args]
# 0. the fast lane (under a minute): ruff (lint), mypy (types of tf_serving_input/, common/ and the model
#    handler) and lint-imports (the layout rule of ARCHITECTURE.md); the tests run only when it passes;
# 1. the unit tests: pytest over tests/ (the pytest args apply here; tests/scale_out/test_flink.py and
#    tests/scale_out/test_flink_cluster.py are skipped in this step, FLINK_JOB_SERVER_JAR being unset);
# 2. the Flink integration test, scripts/flink_integration_test.sh (needs Java 17 and Maven):
#    embedded Flink, then a standing Flink session cluster (scripts/flink_cluster.sh).
# The OS's chromium is installed before step 1 when missing (scripts/ensure_chromium.sh: the UI's browser test).
# Both steps always run; the script fails if either fails. SKIP_FLINK=1 runs step 1 only.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "[test]"

echo "== Fast lane: ruff, mypy, lint-imports =="
started=$SECONDS
.venv/bin/ruff check .
.venv/bin/mypy
# lint-imports prints a banner: show only its verdicts, or everything when a contract breaks.
contracts="$(.venv/bin/lint-imports --no-cache 2>&1)" || { echo "$contracts"; exit 1; }
grep -E "KEPT|BROKEN|^Contracts:" <<< "$contracts"
echo "(fast lane passed in $((SECONDS - started)) s)"

# The UI's browser test drives the OS's Chromium: installed here when missing (CI: Debian, root).
bash scripts/ensure_chromium.sh

echo "== Unit tests (pytest tests) =="
unit=0
env -u FLINK_JOB_SERVER_JAR .venv/bin/python -m pytest tests --durations=25 "$@" || unit=$?

flink=0
if [ -n "${SKIP_FLINK:-}" ] && [ "${SKIP_FLINK}" != "0" ]; then
  echo "== Flink integration test: skipped (SKIP_FLINK is set) =="
else
  echo "== Flink integration test (scripts/flink_integration_test.sh) =="
  BEAM_IMAGE_PIPELINE_VENV_READY=1 bash scripts/flink_integration_test.sh || flink=$?
  if [ "$flink" -ne 0 ] && ! { command -v java && command -v mvn; } >/dev/null 2>&1; then
    echo "(Java 17 and Maven are needed for this step; SKIP_FLINK=1 scripts/test.sh skips it)" >&2
  fi
fi

echo "== Summary: unit tests exit $unit, Flink integration test exit $flink =="
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$flink"
