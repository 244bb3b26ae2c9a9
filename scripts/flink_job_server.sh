#!/usr/bin/env bash
# Prints the path of a Beam Flink job server jar for `--flink_job_server_jar`, obtaining it with
# Maven the first time into the user's cache, ~/.cache/beam-image-pipeline/flink/ (later runs, and
# every other clone of the project, reuse it without running Maven):
#  1. the official shaded jar, org.apache.beam:beam-runners-flink-FLINK_VERSION-job-server:BEAM_VERSION
#     (same version as the Python SDK). One quiet Maven attempt: it costs a few seconds when the jar
#     is missing (one 404), and as soon as Maven Central serves it we get the exact-version server.
#  2. otherwise a launcher built from scripts/flink/pom.xml: the non-shaded runner
#     (beam-runners-flink-1.19:2.62.0, see the pom for why that version) and its dependencies in
#     lib/, plus a manifest-only jar whose Main-Class is the job server driver and whose Class-Path
#     lists lib/*.jar, so `java -jar launcher.jar` (what Beam's FlinkRunner runs) starts it.
#   FLINK_VERSION  Flink version of the official jar tried first (default 1.20)
#   BEAM_VERSION   version of the official jar (default: the apache-beam installed in .venv)
#   FLINK_JARS_CACHE  where the jars are kept (default $XDG_CACHE_HOME/beam-image-pipeline/flink,
#                     XDG_CACHE_HOME defaulting to ~/.cache, beside pip's cache: a fresh clone reuses them)
# Needs Java 11+ (17 recommended) and Maven (`mvn`) on PATH. The jar path goes to stdout,
# progress to stderr. Exit codes: 2 java or mvn missing, 3 Maven failed.
# Maven's own settings apply (e.g. MAVEN_OPTS=-Dmaven.repo.local=DIR, ~/.m2/settings.xml mirrors).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Not $PYTHON: scripts/_venv.sh reads that as the interpreter that creates .venv.
VENV_PYTHON="$ROOT/.venv/bin/python"
FLINK_VERSION="${FLINK_VERSION:-1.20}"
BEAM_VERSION="${BEAM_VERSION:-$("$VENV_PYTHON" -c 'import apache_beam; print(apache_beam.__version__)')}"
CACHE="${FLINK_JARS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/beam-image-pipeline/flink}"
POM="$ROOT/scripts/flink/pom.xml"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
OFFICIAL_ARTIFACT="beam-runners-flink-${FLINK_VERSION}-job-server"
OFFICIAL_JAR="$CACHE/$OFFICIAL_ARTIFACT-$BEAM_VERSION.jar"
# Keyed by the pom's checksum: editing the pom builds a fresh launcher.
LAUNCHER_DIR="$CACHE/launcher-$(cksum < "$POM" | cut -d' ' -f1)"
LAUNCHER_JAR="$LAUNCHER_DIR/launcher.jar"

missing() {
  echo "error: '$1' is not on PATH: Beam's Flink job server needs Java 11+ (17 recommended) to run" \
       "and Maven to obtain it (e.g. apt-get install openjdk-17-jdk-headless maven)" >&2
  exit 2
}
command -v java >/dev/null 2>&1 || missing java
if [ -s "$OFFICIAL_JAR" ]; then echo "$OFFICIAL_JAR"; exit 0; fi
if [ -s "$LAUNCHER_JAR" ] && [ -d "$LAUNCHER_DIR/lib" ]; then echo "$LAUNCHER_JAR"; exit 0; fi
command -v mvn >/dev/null 2>&1 || missing mvn
mkdir -p "$CACHE"

# 1. The official job server jar, quietly; its Maven output goes to a log file.
echo "Trying org.apache.beam:$OFFICIAL_ARTIFACT:$BEAM_VERSION from Maven ..." >&2
if mvn -B -q "$DEPENDENCY_PLUGIN:copy" "-Dartifact=org.apache.beam:$OFFICIAL_ARTIFACT:$BEAM_VERSION:jar" \
    "-DoutputDirectory=$CACHE" >"$CACHE/official.log" 2>&1 && [ -s "$OFFICIAL_JAR" ]; then
  echo "Using $OFFICIAL_JAR" >&2
  echo "$OFFICIAL_JAR"
  exit 0
fi
rm -f "$OFFICIAL_JAR"
echo "Not available (Maven log: $CACHE/official.log); building a launcher from scripts/flink/pom.xml" >&2

# 2. The launcher, built in a temporary folder and moved into place once complete, so an
#    interrupted build is never mistaken for a cached one.
BUILD="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT
echo "Copying the Flink runner and its dependencies (~150 MB the first time) with Maven ..." >&2
if ! mvn -B -q -f "$POM" "$DEPENDENCY_PLUGIN:copy-dependencies" -DincludeScope=runtime \
    "-DoutputDirectory=$BUILD/lib" >&2; then
  echo "error: Maven could not resolve the dependencies of $POM (see above); check that Maven" \
       "Central (or your mirror) is reachable, or pass --flink_job_server_jar yourself" >&2
  exit 3
fi
"$VENV_PYTHON" - "$BUILD" <<'PY'
import os, sys, zipfile
build = sys.argv[1]
jars = sorted(name for name in os.listdir(os.path.join(build, "lib")) if name.endswith(".jar"))
if not jars:
    sys.exit("error: Maven copied no jars")
# Manifest lines are at most 72 bytes; longer values continue on lines starting with one space.
line = "Class-Path: " + " ".join("lib/" + name for name in jars)
lines = [line[:72]] + [" " + line[i:i + 71] for i in range(72, len(line), 71)]
manifest = ("Manifest-Version: 1.0\r\n"
            "Main-Class: org.apache.beam.runners.flink.FlinkJobServerDriver\r\n"
            + "".join(l + "\r\n" for l in lines) + "\r\n")
with zipfile.ZipFile(os.path.join(build, "launcher.jar"), "w", zipfile.ZIP_DEFLATED) as jar:
    jar.writestr("META-INF/MANIFEST.MF", manifest)
PY
rm -rf "$LAUNCHER_DIR"
chmod 755 "$BUILD"  # mktemp made it private; the cache is shared like any build output.
mv -T "$BUILD" "$LAUNCHER_DIR"
trap - EXIT
for old in "$CACHE"/launcher-*; do  # launchers of earlier versions of the pom
  if [ "$old" != "$LAUNCHER_DIR" ]; then rm -rf "$old"; fi
done
echo "Built $LAUNCHER_JAR ($(ls "$LAUNCHER_DIR/lib" | wc -l) jars in lib/)" >&2
echo "$LAUNCHER_JAR"
