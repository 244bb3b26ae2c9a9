#!/usr/bin/env bash
# A local Apache Spark 3.5 standalone cluster from pyspark's jars (a master, workers, a Beam worker pool
# beside each), all on the loopback:
#   scripts/spark_cluster.sh start [--workers N] | status | stop
# `start` prints the master's URL (spark://127.0.0.1:PORT) as its last line. The work is done by
# tests/spark_cluster.py (its docstring: settings, output lines, PID files, exit codes). `start` needs
# .venv (its python runs the pools) and says so; `stop` and `status` need only the standard library,
# so they fall back to python3 where .venv is gone.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)" || { echo "spark_cluster: error: no python3 on PATH" >&2; exit 2; }
exec "$PYTHON" "$ROOT/tests/spark_cluster.py" "$@"
