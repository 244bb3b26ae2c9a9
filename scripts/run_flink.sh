#!/usr/bin/env bash
# Runs the job on Apache Flink through Beam's Flink job server (a Java jar fetched with Maven by
# scripts/flink_job_server.sh into .cache/flink/; needs Java 17 and Maven, no Docker).
#
#   scripts/run_flink.sh --input_csv CSV --output_dir DIR [job flags] [Beam flags]
#
# Default: an embedded Flink cluster inside the job server's JVM (--flink_master=[local]) with the
# Python SDK workers in this process (--environment_type=LOOPBACK).
# A standing cluster: add --flink_master=HOST:8081 (its JobManager REST address). Its task managers
# then run the Python workers, so also give an environment they can start, e.g.
#   --environment_type=DOCKER --sdk_container_image=IMAGE   (IMAGE built from ./Dockerfile), or
#   --environment_type=EXTERNAL --environment_config=localhost:50000  (a Beam worker pool,
#     python -m apache_beam.runners.worker.worker_pool_main --service_port=50000, beside each
#     task manager, with this project installed)
# and paths every task manager can reach (gs://, s3:// inputs; a shared or gs:// --output_dir).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
FLINK_VERSION="${FLINK_VERSION:-1.20}"
export FLINK_VERSION
JAR="$(bash scripts/flink_job_server.sh)"
args=("$@")
has_flag() {
  local arg
  for arg in "${args[@]}"; do
    if [ "$arg" = "$1" ] || [ "${arg#"$1"=}" != "$arg" ]; then return 0; fi
  done
  return 1
}
master="[local]"
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --flink_master=*) master="${args[$i]#--flink_master=}" ;;
    --flink_master) master="${args[$((i + 1))]:-}" ;;
  esac
done
has_flag --flink_master || args+=("--flink_master=$master")
if ! has_flag --environment_type && { [ "$master" = "[local]" ] || [ "$master" = "[auto]" ]; }; then
  args+=("--environment_type=LOOPBACK")
fi
exec .venv/bin/python -m beam_pipeline --runner=FlinkRunner --flink_version="$FLINK_VERSION" \
    --flink_job_server_jar="$JAR" "${args[@]}"
