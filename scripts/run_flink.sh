#!/usr/bin/env bash
# Runs the job on Apache Flink through Beam's Flink job server, a Java program that
# scripts/flink_job_server.sh obtains with Maven into ~/.cache/beam-image-pipeline/flink/ once (the official job server
# jar if Maven Central serves it, else a launcher built from scripts/flink/pom.xml). Needs Java 17
# and Maven; no Docker.
#
#   scripts/run_flink.sh --input_csv CSV --output_dir DIR [job flags] [Beam flags]
#
# Default: an embedded Flink cluster inside the job server's JVM (--flink_master=[local]) with the
# Python SDK workers in this process (--environment_type=LOOPBACK); or run them in a worker pool
# (--environment_type=EXTERNAL --environment_config=localhost:50000, see below).
# A standing cluster: add --flink_master=HOST:8081 (its JobManager REST address). Its task managers
# then run the Python workers, so also give an environment they can start, e.g.
#   --environment_type=DOCKER --sdk_container_image=IMAGE   (IMAGE built from ./Dockerfile), or
#   --environment_type=EXTERNAL --environment_config=localhost:50000  (a Beam worker pool,
#     python -m apache_beam.runners.worker.worker_pool_main --service_port=50000, beside each
#     task manager, with this project installed and that python first on the pool's PATH; one
#     pool per task manager: task managers sharing a pool stop each other's workers)
# and paths every task manager can reach (gs://, s3:// inputs; a shared or gs:// --output_dir).
# Its Flink version is the job server's (1.19 for the launcher): use a cluster of that version.
# scripts/flink_cluster.sh starts such a cluster on this machine (see the README, "Scaling out").
# --flink_job_server_jar=JAR uses another job server jar instead (then no Maven is needed).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
args=("$@")
has_flag() {
  local arg
  for arg in "${args[@]}"; do
    if [ "$arg" = "$1" ] || [ "${arg#"$1"=}" != "$arg" ]; then return 0; fi
  done
  return 1
}
master="[local]"
environment=
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --flink_master=*) master="${args[$i]#--flink_master=}" ;;
    --flink_master) master="${args[$((i + 1))]:-}" ;;
    --environment_type=*) environment="${args[$i]#--environment_type=}" ;;
    --environment_type) environment="${args[$((i + 1))]:-}" ;;
  esac
done
has_flag --flink_master || args+=("--flink_master=$master")
# (--flink_version is ignored by Beam once a job server jar is given, so it is not passed.)
if ! has_flag --flink_job_server_jar; then
  JAR="$(bash scripts/flink_job_server.sh)"
  args+=("--flink_job_server_jar=$JAR")
fi
if [ -z "$environment" ] && { [ "$master" = "[local]" ] || [ "$master" = "[auto]" ]; }; then
  environment=LOOPBACK
  args+=("--environment_type=$environment")
fi
# Workers in a pool or a container: a task manager keeps its Python SDK worker (which imports TensorFlow) between a
# job's stages instead of starting one per stage. Beam honours it where its runner's classes are on the task
# managers' own classpath (scripts/flink_cluster.sh, embedded Flink) and ignores it elsewhere (docs/runners.md).
# Not with LOOPBACK: its workers are threads of this process, which has TensorFlow already, and a kept one was
# still reading from the job server as this process ended (gRPC tracebacks after the summary).
if [ "$environment" != LOOPBACK ] && ! has_flag --environment_cache_millis; then
  args+=("--environment_cache_millis=60000")
fi
exec .venv/bin/python -m beam_pipeline --runner=FlinkRunner "${args[@]}"
