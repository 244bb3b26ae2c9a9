#!/usr/bin/env bash
# Flink integration test (a separate CI step, not part of scripts/test.sh): fetches Beam's Flink
# job server jar with Maven (once, into .cache/flink/), then runs tests/test_flink.py: the job on an
# embedded Flink cluster and on the default local runner over the same small CSV, outputs compared.
#   FLINK_VERSION (default 1.20) picks the job server; extra arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" "[test]"
FLINK_JOB_SERVER_JAR="$(bash scripts/flink_job_server.sh)"
export FLINK_JOB_SERVER_JAR
exec .venv/bin/python -m pytest tests/test_flink.py -rs "$@"
