#!/usr/bin/env bash
# Sets up .venv if needed and runs the whole test suite (what CI runs, through .ci/run):
#   scripts/test.sh [pytest args]
# 0. the fast lane (seconds): ruff (lint), mypy (types of tf_serving_input/, common/ and the model
#    handler), lint-imports (the layout rule of ARCHITECTURE.md) and `mkdocs build --strict` (the docs
#    site: a broken link, a missing page or a lost reference marker fails); the tests run only when it passes;
# 1. the unit tests: pytest over tests/ on both cores (pytest-xdist, `-n 2`: docs/testing.md says why and
#    what it measured; the pytest args apply here; tests/scale_out/test_flink.py and
#    tests/scale_out/test_flink_cluster.py are skipped in this step, FLINK_JOB_SERVER_JAR being unset);
# 2. the scale-out step, scripts/flink_integration_test.sh (needs Java 17 and Maven): embedded Flink, then a
#    standing Flink session cluster (scripts/flink_cluster.sh), then a standing Spark cluster
#    (scripts/spark_cluster.sh). It runs BESIDE step 1, from its start: alone it kept the two cores ~70 %
#    busy (JVM start-ups, a TaskManager's loss being noticed, jars shipped, Maven's downloads on a fresh
#    machine), and step 1 fills what it leaves (docs/testing.md). Its output goes to .cache/scale-out.log,
#    printed whole once step 1 is done; stopping this script (Ctrl-C) stops it too, clusters included.
# The OS's chromium is installed before step 1 when missing (scripts/ensure_chromium.sh: the UI's browser test).
# Both steps always run; the script fails if either fails. SKIP_FLINK=1 runs step 1 only.
# Every step's wall time is printed at the end, and the unit step's time per test file
# (scripts/test_times.py over its JUnit XML, .cache/test-times.xml), so a change that adds minutes shows.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python writes the .pyc files of what the tests import beyond the commands (scripts/_venv.sh compiles those),
# once, instead of every test process compiling them anew where PYTHONDONTWRITEBYTECODE is set (CI's machines).
unset PYTHONDONTWRITEBYTECODE
steps=()
timed() {  # timed NAME SECONDS: records a step's wall time for the summary.
  steps+=("$(printf '%-22s %5d s' "$1" "$2")")
}
started=$SECONDS
BEAM_IMAGE_PIPELINE_COMPILE_LATER=1 source scripts/_venv.sh "[test]"
timed "install (.venv)" $((SECONDS - started))

echo "== Fast lane: ruff, mypy, lint-imports, mkdocs build --strict =="
started=$SECONDS
# What the commands import is compiled (.pyc, scripts/_venv.sh) beside the fast lane, which keeps one core busy;
# the tests wait for it below.
compile_imports &
compiling=$!
.venv/bin/ruff check .
.venv/bin/mypy
# lint-imports prints a banner: show only its verdicts, or everything when a contract breaks.
contracts="$(.venv/bin/lint-imports --no-cache 2>&1)" || { echo "$contracts"; exit 1; }
grep -E "KEPT|BROKEN|^Contracts:" <<< "$contracts"
# The site goes to .cache/site (ignored); its log only when the build fails.
site_log="$(.venv/bin/mkdocs build --strict --site-dir .cache/site 2>&1)" || { echo "$site_log"; exit 1; }
echo "docs site: built (mkdocs build --strict)"
wait "$compiling" || exit 1
timed "fast lane" $((SECONDS - started))

mkdir -p .cache
# The scale-out step in a session of its own (setsid): its process group is what a stop signals. Its pytest
# turns the SIGINT a background job is born ignoring back into KeyboardInterrupt (tests/conftest.py), so a
# stop ends its jobs by their finalizers, and flink_integration_test.sh's EXIT trap stops its clusters.
flink=0
scale_pid=
stop_scale_out() {
  if [ -n "$scale_pid" ] && kill -0 "$scale_pid" 2>/dev/null; then
    kill -INT -- "-$scale_pid" 2>/dev/null || true
    wait "$scale_pid" 2>/dev/null || true
  fi
}
trap stop_scale_out EXIT
trap 'stop_scale_out; exit 130' INT
trap 'stop_scale_out; exit 143' TERM
if [ -n "${SKIP_FLINK:-}" ] && [ "${SKIP_FLINK}" != "0" ]; then
  echo "== Scale-out step (Flink, Spark): skipped (SKIP_FLINK is set) =="
else
  echo "== Scale-out step (scripts/flink_integration_test.sh): started beside the unit tests, output in .cache/scale-out.log =="
  rm -f .cache/scale-out.log .cache/scale-out.seconds
  setsid bash -c 'started=$SECONDS; BEAM_IMAGE_PIPELINE_VENV_READY=1 bash scripts/flink_integration_test.sh; code=$?
                  echo $((SECONDS - started)) > .cache/scale-out.seconds; exit $code' > .cache/scale-out.log 2>&1 &
  scale_pid=$!
fi

# The UI's browser test drives the OS's Chromium: installed here when missing (CI: Debian, root).
started=$SECONDS
bash scripts/ensure_chromium.sh
timed "chromium" $((SECONDS - started))

echo "== Unit tests (pytest tests) =="
started=$SECONDS
unit=0
env -u FLINK_JOB_SERVER_JAR -u SPARK_JOB_SERVER_JAR .venv/bin/python -m pytest tests -n 2 --durations=25 \
    --junitxml=.cache/test-times.xml -o junit_family=xunit2 "$@" || unit=$?
timed "unit tests" $((SECONDS - started))

# pytest exits 2 when interrupted (Ctrl-C, or an error while collecting). A Ctrl-C reaches pytest, which
# handles it and exits 2, and bash then runs no INT trap (it does so only for a child that died of the
# signal): found by a Ctrl-C 100 s into a run, after which this script went on to wait for the scale-out step.
if [ "$unit" -eq 2 ] && [ -n "$scale_pid" ]; then
  echo "== Unit tests interrupted (pytest exit 2): stopping the scale-out step =="
  stop_scale_out
  scale_pid=
  flink=130
fi
if [ -n "$scale_pid" ]; then
  echo "== Scale-out step (scripts/flink_integration_test.sh): waiting for it to end =="
  wait "$scale_pid" || flink=$?
  scale_pid=
  cat .cache/scale-out.log
  if [ "$flink" -ne 0 ] && ! { command -v java && command -v mvn; } >/dev/null 2>&1; then
    echo "(Java 17 and Maven are needed for this step; SKIP_FLINK=1 scripts/test.sh skips it)" >&2
  fi
  timed "scale-out (beside)" "$(cat .cache/scale-out.seconds 2>/dev/null || echo 0)"
fi

if [ -s .cache/test-times.xml ]; then
  echo "== Unit step: wall time per test file (scripts/test_times.py .cache/test-times.xml) =="
  .venv/bin/python scripts/test_times.py .cache/test-times.xml --top 15 || true
fi
echo "== Wall time per step =="
printf '  %s\n' "${steps[@]}"
printf '  %-22s %5d s\n' "total" "$SECONDS"
echo "== Summary: unit tests exit $unit, scale-out step (Flink, Spark) exit $flink =="
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$flink"
