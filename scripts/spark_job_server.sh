#!/usr/bin/env bash
# Prints the path of a Beam Spark job server jar for `--spark_job_server_jar`, obtaining what it needs the
# first time into the user's cache, ~/.cache/beam-image-pipeline/spark/ (later runs, and every other clone
# of the project, reuse it without downloading anything):
#  - Spark itself, SPARK_VERSION's jars (Scala 2.12) from pyspark's source distribution on PyPI
#    (`pip download`, nothing installed), unpacked into CACHE/spark-SPARK_VERSION/jars: the standing
#    cluster of scripts/spark_cluster.sh runs them, and the job server (Spark's driver) runs with them;
#  - Beam's Spark runner: Maven Central serves no beam-runners-spark-3-job-server jar at any version, so a
#    launcher is built from scripts/spark/pom.xml (the non-shaded beam-runners-spark-3:2.62.0 and its
#    dependencies in lib/, see the pom for why that version) and a manifest-only jar whose Main-Class is
#    the job server driver and whose Class-Path lists lib/*.jar and Spark's jars, so `java -jar
#    launcher.jar` (what Beam's Python SparkRunner runs) starts it.
#   SPARK_VERSION      Spark version (default 3.5.0: the newest that Beam's Spark 3 runner is tested with,
#                      runners/spark/3/build.gradle; it runs on Java 17)
#   SPARK_JARS_CACHE   where everything is kept (default $XDG_CACHE_HOME/beam-image-pipeline/spark,
#                      XDG_CACHE_HOME defaulting to ~/.cache: a fresh clone reuses it)
# Needs Java 17 and Maven (`mvn`) on PATH, and .venv (its pip downloads pyspark). The jar path goes to
# stdout, progress to stderr. Exit codes: 2 java or mvn missing, 3 a download failed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_PYTHON="$ROOT/.venv/bin/python"
SPARK_VERSION="${SPARK_VERSION:-3.5.0}"
CACHE="${SPARK_JARS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-image-pipeline/spark}"
POM="$ROOT/scripts/spark/pom.xml"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
SPARK_HOME_DIR="$CACHE/spark-$SPARK_VERSION"
# Keyed by the pom's checksum and Spark's version: editing either builds a fresh launcher.
LAUNCHER_DIR="$CACHE/launcher-$(cksum < "$POM" | cut -d' ' -f1)-spark-$SPARK_VERSION"
LAUNCHER_JAR="$LAUNCHER_DIR/launcher.jar"

missing() {
  echo "error: '$1' is not on PATH: Beam's Spark job server needs Java 17 to run and Maven to obtain it" \
       "(e.g. apt-get install openjdk-17-jdk-headless maven)" >&2
  exit 2
}
command -v java >/dev/null 2>&1 || missing java
if [ -s "$LAUNCHER_JAR" ] && [ -d "$LAUNCHER_DIR/lib" ] && [ -f "$SPARK_HOME_DIR/RELEASE" ]; then
  echo "$LAUNCHER_JAR"; exit 0
fi
command -v mvn >/dev/null 2>&1 || missing mvn
mkdir -p "$CACHE"
BUILD="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT

# 1. Spark's jars, moved into place once complete (RELEASE last: Spark's launcher code reads a folder
#    with a RELEASE file as a distribution, whose jars are in jars/).
if [ ! -f "$SPARK_HOME_DIR/RELEASE" ]; then
  echo "Downloading pyspark $SPARK_VERSION's source distribution (~320 MB, once) for Spark's jars ..." >&2
  if ! "$VENV_PYTHON" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
      -d "$BUILD/dl" "pyspark==$SPARK_VERSION" >&2; then
    echo "error: pip could not download pyspark==$SPARK_VERSION (is PyPI, or your index, reachable?)" >&2
    exit 3
  fi
  mkdir -p "$BUILD/spark"
  tar -xzf "$BUILD/dl/pyspark-$SPARK_VERSION.tar.gz" -C "$BUILD/spark" --strip-components=2 \
      "pyspark-$SPARK_VERSION/deps/jars"
  rm -rf "$BUILD/dl" "$SPARK_HOME_DIR"
  echo "Spark $SPARK_VERSION (Scala 2.12), jars from pyspark $SPARK_VERSION on PyPI" > "$BUILD/spark/RELEASE"
  chmod 755 "$BUILD/spark"
  mv -T "$BUILD/spark" "$SPARK_HOME_DIR"
fi

# 2. The launcher, built in the temporary folder and moved into place once complete, so an interrupted
#    build is never mistaken for a cached one.
echo "Copying Beam's Spark runner and its dependencies (~95 MB the first time) with Maven ..." >&2
if ! mvn -B -q -f "$POM" "$DEPENDENCY_PLUGIN:copy-dependencies" -DincludeScope=runtime \
    "-DoutputDirectory=$BUILD/launcher/lib" >&2; then
  echo "error: Maven could not resolve the dependencies of $POM (see above); check that Maven" \
       "Central (or your mirror) is reachable, or pass --spark_job_server_jar yourself" >&2
  exit 3
fi
# Spark brings SLF4J 2 and its Log4j 2 binding; Beam's SLF4J 1.7 API first on the classpath would leave
# the driver's and executors' logs unbound.
rm -f "$BUILD"/launcher/lib/slf4j-api-1.*.jar
"$VENV_PYTHON" - "$BUILD/launcher" "$SPARK_HOME_DIR/jars" <<'PY'
import os, sys, zipfile
launcher, spark_jars = sys.argv[1], sys.argv[2]
beam = sorted(name for name in os.listdir(os.path.join(launcher, "lib")) if name.endswith(".jar"))
spark = sorted(name for name in os.listdir(spark_jars) if name.endswith(".jar"))
if not beam or not spark:
    sys.exit("error: no jars to list")
# Beam's jars first (its newer Jackson, Guava, protobuf), then Spark's, relative to the launcher's folder.
cache = os.path.dirname(os.path.dirname(launcher))  # the launcher's folder is moved into the cache as is
relative = "../" + os.path.relpath(spark_jars, cache)
paths = ["lib/" + name for name in beam] + [f"{relative}/{name}" for name in spark]
# Manifest lines are at most 72 bytes; longer values continue on lines starting with one space.
line = "Class-Path: " + " ".join(paths)
lines = [line[:72]] + [" " + line[i:i + 71] for i in range(72, len(line), 71)]
manifest = ("Manifest-Version: 1.0\r\n"
            "Main-Class: org.apache.beam.runners.spark.SparkJobServerDriver\r\n"
            + "".join(l + "\r\n" for l in lines) + "\r\n")
with zipfile.ZipFile(os.path.join(launcher, "launcher.jar"), "w", zipfile.ZIP_DEFLATED) as jar:
    jar.writestr("META-INF/MANIFEST.MF", manifest)
PY
rm -rf "$LAUNCHER_DIR"
chmod 755 "$BUILD/launcher"
mv -T "$BUILD/launcher" "$LAUNCHER_DIR"
for old in "$CACHE"/launcher-*; do  # launchers of earlier versions of the pom or of Spark
  if [ "$old" != "$LAUNCHER_DIR" ]; then rm -rf "$old"; fi
done
echo "Built $LAUNCHER_JAR ($(ls "$LAUNCHER_DIR/lib" | wc -l) jars in lib/, Spark $SPARK_VERSION)" >&2
echo "$LAUNCHER_JAR"
