#!/usr/bin/env bash
# A local Apache Flink 1.19 session cluster from the launcher's jars (JobManager, TaskManagers, a Beam
# worker pool beside each), all on the loopback:
#   scripts/flink_cluster.sh start [--task_managers N] | status | stop
# The work is done by tests/flink_cluster.py (its docstring: settings, output lines, PID files, exit
# codes). `start` needs .venv (its python runs the pools) and says so; `stop` and `status` need only
# the standard library, so they fall back to python3 where .venv is gone.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$ROOT/.venv/bin/python"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)" || { echo "flink_cluster: error: no python3 on PATH" >&2; exit 2; }
exec "$PYTHON" "$ROOT/tests/flink_cluster.py" "$@"
