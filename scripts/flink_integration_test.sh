#!/usr/bin/env bash
# The scale-out step (run by scripts/test.sh beside its unit step; also runnable alone): Flink and Spark. Obtains
# Beam's Flink job server with Maven (once, into ~/.cache/beam-image-pipeline/flink/; see
# scripts/flink_job_server.sh) and Spark's jars and Beam's Spark job server (once, into
# ~/.cache/beam-image-pipeline/spark/; see scripts/spark_job_server.sh), then runs, in one pytest process
# (the Flink and Spark jobs share the local reference runs: tests/conftest.py's small_run and
# small_predictions)
#  - tests/scale_out/test_flink.py: the job on an embedded Flink cluster (Python workers in a worker pool);
#  - tests/scale_out/test_flink_cluster.py: on a standing Flink session cluster that
#    scripts/flink_cluster.sh starts from the job server's jars (two TaskManagers, a worker pool
#    beside each): the job with a TaskManager killed mid-run followed by a rerun that resumes;
#  - tests/scale_out/test_spark_cluster.py: on a standing Spark cluster that scripts/spark_cluster.sh
#    starts (a master, two workers, a worker pool beside each), the job with a worker killed mid-run
#    (Spark re-runs its tasks), then the predict job over its output;
# each against the default local runner over the same CSV, outputs compared.
#   scripts/flink_integration_test.sh [pytest args]
#   FLINK_JOB_SERVER_JAR=JAR  use that job server jar instead of obtaining one (the standing
#                             cluster needs the launcher that scripts/flink_job_server.sh builds)
#   SPARK_JOB_SERVER_JAR=JAR  the same for Spark (the launcher of scripts/spark_job_server.sh)
#   FLINK_TEST_TIMEOUT=SECONDS  a Flink or Spark run fails after that long (default 480)
# Needs Java 17 and Maven; fails (exit 2) with a message when they are missing.
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
if [ -z "${SPARK_JOB_SERVER_JAR:-}" ]; then
  SPARK_JOB_SERVER_JAR="$(bash scripts/spark_job_server.sh)"
fi
export SPARK_JOB_SERVER_JAR
# Every JVM of this step (a job server per job, the cluster's JobManager and TaskManagers) lives for minutes
# and moves little data, on a small machine: C1 only (no C2 compiler threads) and the serial collector
# cut their CPU time; a job server reaches "started" on 4 s of CPU instead of 7.
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:+$JAVA_TOOL_OPTIONS }-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
echo "Flink job server: $FLINK_JOB_SERVER_JAR"
echo "Spark job server: $SPARK_JOB_SERVER_JAR"
# The standing cluster's folder (conf, logs, PID files): tests/scale_out/test_flink_cluster.py starts and
# stops the cluster there, and whatever happens to pytest, this script stops it on exit by the
# PIDs recorded there.
FLINK_TEST_CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/flink-test-cluster.XXXXXX")"
SPARK_TEST_CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/spark-test-cluster.XXXXXX")"
export FLINK_TEST_CLUSTER_DIR SPARK_TEST_CLUSTER_DIR
trap 'FLINK_CLUSTER_DIR="$FLINK_TEST_CLUSTER_DIR" bash scripts/flink_cluster.sh stop 2>/dev/null || true
      SPARK_CLUSTER_DIR="$SPARK_TEST_CLUSTER_DIR" bash scripts/spark_cluster.sh stop 2>/dev/null || true
      rm -rf "$FLINK_TEST_CLUSTER_DIR" "$SPARK_TEST_CLUSTER_DIR"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# One process (-n 0): the tests share one standing cluster of each engine, which a second pytest-xdist
# worker would start jobs on, and stop, beside the first's; and they share the local reference runs.
.venv/bin/python -m pytest tests/scale_out/test_flink.py tests/scale_out/test_flink_cluster.py \
    tests/scale_out/test_spark_cluster.py -n 0 -rs --durations=0 "$@"
