#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite (what CI runs, through .ci/run):
#   scripts/test.sh [pytest args]
# 0. the fast lane (seconds): ruff (lint), mypy (types of tf_serving_input/, common/ and the model
#    handler), lint-imports (the layout rule of ARCHITECTURE.md) and `mkdocs build --strict` (the docs
#    site: a broken link, a missing page or a lost reference marker fails); the tests run only when it passes;
# 1. the unit tests: pytest over tests/ on both cores (pytest-xdist, `-n 2`: docs/testing.md says why and
#    what it measured; the pytest args apply here; tests/scale_out/test_flink.py and
#    tests/scale_out/test_flink_cluster.py are skipped in this step, FLINK_JOB_SERVER_JAR being unset);
# 2. the Flink integration test, scripts/flink_integration_test.sh (needs Java 17 and Maven):
#    embedded Flink, then a standing Flink session cluster (scripts/flink_cluster.sh), then a standing
#    Spark cluster (scripts/spark_cluster.sh).
# The OS's chromium is installed before step 1 when missing (scripts/ensure_chromium.sh: the UI's browser test).
# Both steps always run; the script fails if either fails. SKIP_FLINK=1 runs step 1 only.
# Every step's wall time is printed at the end, and the unit step's time per test file
# (scripts/test_times.py over its JUnit XML, .cache/test-times.xml), so a change that adds minutes shows.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=()
timed() {  # timed NAME SECONDS: records a step's wall time for the summary.
  steps+=("$(printf '%-22s %5d s' "$1" "$2")")
}
started=$SECONDS
source scripts/_venv.sh "[test]"
timed "install (.venv)" $((SECONDS - started))

echo "== Fast lane: ruff, mypy, lint-imports, mkdocs build --strict =="
started=$SECONDS
.venv/bin/ruff check .
.venv/bin/mypy
# lint-imports prints a banner: show only its verdicts, or everything when a contract breaks.
contracts="$(.venv/bin/lint-imports --no-cache 2>&1)" || { echo "$contracts"; exit 1; }
grep -E "KEPT|BROKEN|^Contracts:" <<< "$contracts"
# The site goes to .cache/site (ignored); its log only when the build fails.
site_log="$(.venv/bin/mkdocs build --strict --site-dir .cache/site 2>&1)" || { echo "$site_log"; exit 1; }
echo "docs site: built (mkdocs build --strict)"
timed "fast lane" $((SECONDS - started))

# The UI's browser test drives the OS's Chromium: installed here when missing (CI: Debian, root).
started=$SECONDS
bash scripts/ensure_chromium.sh
timed "chromium" $((SECONDS - started))

echo "== Unit tests (pytest tests) =="
started=$SECONDS
mkdir -p .cache
unit=0
env -u FLINK_JOB_SERVER_JAR -u SPARK_JOB_SERVER_JAR .venv/bin/python -m pytest tests -n 2 --durations=25 \
    --junitxml=.cache/test-times.xml -o junit_family=xunit2 "$@" || unit=$?
timed "unit tests" $((SECONDS - started))

flink=0
if [ -n "${SKIP_FLINK:-}" ] && [ "${SKIP_FLINK}" != "0" ]; then
  echo "== Flink integration test: skipped (SKIP_FLINK is set) =="
else
  echo "== Flink integration test (scripts/flink_integration_test.sh) =="
  started=$SECONDS
  BEAM_IMAGE_PIPELINE_VENV_READY=1 bash scripts/flink_integration_test.sh || flink=$?
  if [ "$flink" -ne 0 ] && ! { command -v java && command -v mvn; } >/dev/null 2>&1; then
    echo "(Java 17 and Maven are needed for this step; SKIP_FLINK=1 scripts/test.sh skips it)" >&2
  fi
  timed "Flink step" $((SECONDS - started))
fi

if [ -s .cache/test-times.xml ]; then
  echo "== Unit step: wall time per test file (scripts/test_times.py .cache/test-times.xml) =="
  .venv/bin/python scripts/test_times.py .cache/test-times.xml --top 15 || true
fi
echo "== Wall time per step =="
printf '  %s\n' "${steps[@]}"
printf '  %-22s %5d s\n' "total" "$SECONDS"
echo "== Summary: unit tests exit $unit, Flink integration test exit $flink =="
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$flink"
