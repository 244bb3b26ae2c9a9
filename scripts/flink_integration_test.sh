#!/usr/bin/env bash
# Flink integration test (the second step of scripts/test.sh, also runnable alone): obtains Beam's
# Flink job server with Maven (once, into .cache/flink/; see scripts/flink_job_server.sh), then runs
# tests/test_flink.py: the job on an embedded Flink cluster (Python workers in a worker pool) and on
# the default local runner over the same small CSV, outputs compared.
#   scripts/flink_integration_test.sh [pytest args]
#   FLINK_JOB_SERVER_JAR=JAR  use that job server jar instead of obtaining one
#   FLINK_TEST_TIMEOUT=SECONDS  the Flink run fails after that long (default 480)
# Needs Java 11+ (17 recommended) and Maven; fails (exit 2) with a message when they are missing.
set -euo pipefail
if [ -z "${BEAM_IMAGE_PIPELINE_VENV_READY:-}" ]; then
  source "$(dirname "$0")/_venv.sh" "[test]"
else  # scripts/test.sh has just set up .venv
  cd "$(dirname "$0")/.."
fi
if [ -z "${FLINK_JOB_SERVER_JAR:-}" ]; then
  FLINK_JOB_SERVER_JAR="$(bash scripts/flink_job_server.sh)"
fi
export FLINK_JOB_SERVER_JAR
echo "Flink job server: $FLINK_JOB_SERVER_JAR"
exec .venv/bin/python -m pytest tests/test_flink.py -rs "$@"
