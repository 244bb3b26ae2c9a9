#!/usr/bin/env bash
# Prints the path of Beam's Flink job server jar, fetching it with Maven into .cache/flink/ the
# first time (Maven Central: org.apache.beam:beam-runners-flink-FLINK_VERSION-job-server:BEAM_VERSION).
#   FLINK_VERSION  Flink version of the job server (default 1.20; Beam publishes 1.19, 1.20, 2.0, 2.1, 2.2)
#   BEAM_VERSION   must match the Python SDK (default: the apache-beam installed in .venv)
# Needs Java 11+ (17 recommended) and Maven (`mvn`) on PATH; progress goes to stderr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
FLINK_VERSION="${FLINK_VERSION:-1.20}"
BEAM_VERSION="${BEAM_VERSION:-$("$PYTHON" -c 'import apache_beam; print(apache_beam.__version__)')}"
ARTIFACT="beam-runners-flink-${FLINK_VERSION}-job-server"
CACHE="$ROOT/.cache/flink"
JAR="$CACHE/$ARTIFACT-$BEAM_VERSION.jar"
if [ ! -s "$JAR" ]; then
  for tool in mvn java; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "error: '$tool' is needed to fetch and run Beam's Flink job server (Java 17 and Maven)" >&2
      exit 2
    fi
  done
  mkdir -p "$CACHE"
  echo "Fetching org.apache.beam:$ARTIFACT:$BEAM_VERSION with Maven into $CACHE (once)" >&2
  if ! mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
      "-Dartifact=org.apache.beam:$ARTIFACT:$BEAM_VERSION:jar" "-DoutputDirectory=$CACHE" >&2; then
    echo "error: Maven could not fetch org.apache.beam:$ARTIFACT:$BEAM_VERSION (see above); set" \
         "FLINK_VERSION to another published Flink version, or pass --flink_job_server_jar yourself" >&2
    exit 3
  fi
fi
echo "$JAR"
