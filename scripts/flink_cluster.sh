#!/usr/bin/env bash
# A local Apache Flink 1.19 session cluster laid out as a standing cluster is, from the jars that
# scripts/flink_job_server.sh resolves (no Flink distribution is downloaded):
#  - 1 JobManager (StandaloneSessionClusterEntrypoint; classpath: the launcher's lib/*);
#  - N TaskManagers (TaskManagerRunner; classpath: Flink's own jars only, as on a real cluster:
#    the job server ships Beam's jars with each job);
#  - beside each TaskManager, its own Beam worker pool (scripts/flink/worker_pool.py: Beam's
#    worker_pool_main servicer, bound to one address), which starts the Python SDK workers with
#    the .venv's python.
#
#   scripts/flink_cluster.sh start [--task_managers N]  start the cluster and wait until the REST
#                                                        API lists N TaskManagers; on a cluster
#                                                        that still has its JobManager, restart
#                                                        only what is missing (e.g. a killed
#                                                        TaskManager), same configuration and ports
#   scripts/flink_cluster.sh status                     what runs, and the endpoints
#   scripts/flink_cluster.sh stop                       end the processes it started, found by
#                                                        their recorded PIDs, and delete its
#                                                        scratch files; safe to call twice
#
# `start` prints KEY=VALUE lines on stdout (also kept in DIR/cluster.env), progress on stderr:
#   FLINK_REST=localhost:PORT                     the JobManager's REST API: --flink_master
#   FLINK_ENVIRONMENT_CONFIG=beam-worker-pool:P   --environment_type=EXTERNAL --environment_config
#   FLINK_WORKER_POOLS=127.0.0.2:P,127.0.0.3:P    the pools, in TaskManager order
#   FLINK_CLUSTER_DIR=DIR
# One pool per TaskManager, as on a real cluster where every machine runs a pool at the same
# address (e.g. localhost:50000): here TaskManager i resolves the host name beam-worker-pool to
# 127.0.0.(i+1) (its JVM's own hosts file, -Djdk.net.hosts.file), where its pool listens. Beam
# names a single pool address per job, and TaskManagers sharing one pool stop each other's
# workers (see scripts/flink/worker_pool.py). Linux: all of 127.0.0.0/8 is the loopback.
#
#   FLINK_CLUSTER_DIR      conf, logs and PID files (default .cache/flink/cluster)
#   FLINK_TASK_MANAGERS    N (default 2; --task_managers wins)
#   FLINK_TASK_SLOTS       slots per TaskManager (default 1: a job of parallelism N uses all N)
#   FLINK_CLUSTER_TIMEOUT  seconds `start` waits for the cluster (default 180)
#   FLINK_LIB              a folder of Flink 1.19 + Beam runner jars (default: the launcher's lib/)
# Memory, sized for a 2-core machine that runs tests beside the cluster: JobManager heap 512 MB;
# each TaskManager heap 256 MB + direct 256 MB (+ metaspace); the Python workers on top.
# Everything listens on the loopback only. Exit codes: 1 the cluster did not come up (its logs
# are printed and what was started is stopped), 2 usage or missing prerequisites.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_PYTHON="$ROOT/.venv/bin/python"
DIR="${FLINK_CLUSTER_DIR:-$ROOT/.cache/flink/cluster}"
TASK_MANAGERS="${FLINK_TASK_MANAGERS:-2}"
SLOTS="${FLINK_TASK_SLOTS:-1}"
TIMEOUT="${FLINK_CLUSTER_TIMEOUT:-180}"
POOL_HOST="beam-worker-pool"
CONF="$DIR/conf"
PIDS="$DIR/pids"
LOGS="$DIR/logs"
ENV_FILE="$DIR/cluster.env"
PORTS_FILE="$DIR/ports"

usage() { sed -n '11,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
log() { echo "flink_cluster: $*" >&2; }
pool_ip() { echo "127.0.0.$(($1 + 1))"; }  # the loopback address of TaskManager $1's pool

# --- processes: each in a session (process group) of its own, recorded as "PID START_TIME" ------
# A process's start time (nothing once it has ended, zombie included).
start_time() { awk '$3 != "Z" {print $22}' "/proc/$1/stat" 2>/dev/null || true; }
# Prints NAME's recorded PID if that very process still runs (not a later one reusing the PID).
running_pid() {
  local file="$PIDS/$1.pid" pid started
  [ -f "$file" ] && read -r pid started < "$file" && [ -n "$pid" ] &&
    [ "$(start_time "$pid")" = "$started" ] && echo "$pid"
}
# launch NAME CWD COMMAND...: starts COMMAND in CWD in a new session, output to LOGS/NAME.log.
launch() {
  local name="$1" cwd="$2" pid started=""
  shift 2
  mkdir -p "$cwd"
  # A restarted member's earlier log is kept, once, as NAME.log.previous.
  if [ -f "$LOGS/$name.log" ]; then mv -f "$LOGS/$name.log" "$LOGS/$name.log.previous"; fi
  # A background child of a script is no process-group leader, so setsid execs without forking
  # and $! is the command's own PID.
  (cd "$cwd" && exec setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null) &
  pid=$!
  for _ in $(seq 50); do
    started="$(start_time "$pid")"
    [ -n "$started" ] && break
    sleep 0.1
  done
  echo "$pid $started" > "$PIDS/$name.pid"
}
# end NAME...: ends these members' process groups (each process and what it started, e.g. a pool's
# SDK workers): TERM to all at once, KILL to what is left after 10 s. A recorded PID that a later,
# unrelated process has taken is left alone. A member that has ended may have left its group
# behind (a killed pool's workers): while any member lives, no new process can get the group's ID.
end() {
  local name pid started entry
  local -a stopping=()
  for name in "$@"; do
    if [ -f "$PIDS/$name.pid" ] && read -r pid started < "$PIDS/$name.pid" && [ -n "$pid" ]; then
      if [ "$(start_time "$pid")" = "$started" ]; then
        kill -TERM -- "-$pid" 2>/dev/null || true
        stopping+=("$name $pid $started")
      elif [ ! -e "/proc/$pid" ]; then
        kill -KILL -- "-$pid" 2>/dev/null || true
      fi
    fi
    rm -f "$PIDS/$name.pid"
  done
  for entry in ${stopping[@]+"${stopping[@]}"}; do
    read -r name pid started <<< "$entry"
    for _ in $(seq 100); do
      [ "$(start_time "$pid")" = "$started" ] || break
      sleep 0.1
    done
    if [ "$(start_time "$pid")" = "$started" ] || [ ! -e "/proc/$pid" ]; then
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    log "stopped $name (pid $pid)"
  done
}
members() {  # every recorded member: TaskManagers first, the JobManager last
  local file
  for file in "$PIDS"/taskmanager-*.pid "$PIDS"/worker-pool-*.pid "$PIDS"/jobmanager.pid; do
    if [ -f "$file" ]; then basename "$file" .pid; fi
  done
}

stop() {
  if [ -z "$(members 2>/dev/null)" ]; then log "not running ($DIR)"; return 0; fi
  # shellcheck disable=SC2046  # member names are single words
  end $(members)
  # The cluster's scratch space: the blob store keeps every job's jars (~150 MB each).
  rm -rf "$ENV_FILE" "$DIR/tmp"
}

# --- configuration ----------------------------------------------------------------------------
# "REST RPC POOL": two free ports on localhost, and one free on every pool address.
choose_ports() {
  "$VENV_PYTHON" - "$TASK_MANAGERS" <<'PY'
import socket, sys
held = []
def bind(ip, port=0):
    s = socket.socket()
    s.bind((ip, port))
    held.append(s)
    return s.getsockname()[1]
rest, rpc = bind("127.0.0.1"), bind("127.0.0.1")
pool_ips = [f"127.0.0.{i + 2}" for i in range(int(sys.argv[1]))]
for _ in range(100):
    pool = bind(pool_ips[0])
    try:
        for ip in pool_ips[1:]:
            bind(ip, pool)
        break
    except OSError:
        continue
else:
    sys.exit("no port is free on all of " + ", ".join(pool_ips))
print(rest, rpc, pool)
PY
}

write_conf() {  # write_conf REST_PORT RPC_PORT
  mkdir -p "$CONF" "$DIR/tmp"
  # Without Flink's start scripts a TaskManager must be given every memory pool, and the JVM
  # flags in start_task_manager must match them (heap = framework + task heap; direct memory =
  # framework + task off-heap + network; metaspace). Framework off-heap holds a batch job's
  # 64 MB shuffle read buffer (Flink's default 128m; less fails the job with an OOM).
  cat > "$CONF/flink-conf.yaml" <<EOF
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $2
jobmanager.bind-host: localhost
jobmanager.memory.process.size: 768m
rest.address: localhost
rest.bind-address: localhost
rest.port: $1
taskmanager.host: localhost
taskmanager.bind-host: localhost
taskmanager.numberOfTaskSlots: $SLOTS
taskmanager.cpu.cores: $SLOTS
taskmanager.memory.framework.heap.size: 64m
taskmanager.memory.task.heap.size: 192m
taskmanager.memory.framework.off-heap.size: 128m
taskmanager.memory.task.off-heap.size: 0m
taskmanager.memory.managed.size: 64m
taskmanager.memory.network.min: 128m
taskmanager.memory.network.max: 128m
taskmanager.memory.jvm-metaspace.size: 256m
taskmanager.memory.jvm-overhead.min: 64m
taskmanager.memory.jvm-overhead.max: 64m
# A batch job's tasks run side by side in one slot, and each sort-merge result partition takes
# this many 32 KB network buffers (Flink's default, 512, runs out of 128m after a few tasks).
taskmanager.network.sort-shuffle.min-buffers: 64
# Spread a job's slots over all TaskManagers.
cluster.evenly-spread-out-slots: true
# A TaskManager that dies is noticed within seconds instead of the default 50.
heartbeat.interval: 2000
heartbeat.timeout: 20000
io.tmp.dirs: $DIR/tmp
blob.storage.directory: $DIR/tmp
web.tmpdir: $DIR/tmp
EOF
}

# --- members ----------------------------------------------------------------------------------
find_lib() {
  if [ -n "${FLINK_LIB:-}" ]; then echo "$FLINK_LIB"; return; fi
  local jar
  jar="$(bash "$ROOT/scripts/flink_job_server.sh")" || exit 2
  if [ ! -d "$(dirname "$jar")/lib" ]; then
    log "error: no lib/ of Flink jars beside $jar (an official shaded job server jar);" \
        "set FLINK_LIB to a folder of Flink 1.19 jars"
    exit 2
  fi
  echo "$(dirname "$jar")/lib"
}
# Flink's own jars only: what a Flink distribution's lib/ holds, none of Beam's.
flink_classpath() {
  local jar cp=""
  for jar in "$LIB"/*.jar; do
    case "$(basename "$jar")" in
      flink-*|slf4j-*|commons-*|kryo-*|chill-*|minlog-*|objenesis-*|snakeyaml*|lz4-*|snappy-*|\
      jsr305-*|javassist-*|async-profiler-*) cp="$cp${cp:+:}$jar" ;;
    esac
  done
  echo "$cp"
}
# What Flink's start scripts give every JVM on Java 17 (the distribution's env.java.opts.all):
# Flink reflects into these JDK packages.
JAVA_MODULE_OPTS=(
  --add-exports=java.base/sun.net.util=ALL-UNNAMED --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED
  --add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)

start_job_manager() {
  launch jobmanager "$DIR/jobmanager" java "${JAVA_MODULE_OPTS[@]}" -Xms512m -Xmx512m -cp "$LIB/*" \
    org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint --configDir "$CONF"
}
start_task_manager() {  # start_task_manager I
  # This JVM's name resolution: the pool's host name is TaskManager I's own pool.
  printf '127.0.0.1 localhost %s\n%s %s\n' "$(hostname)" "$(pool_ip "$1")" "$POOL_HOST" \
    > "$CONF/hosts-taskmanager-$1"
  launch "taskmanager-$1" "$DIR/taskmanager-$1" java "${JAVA_MODULE_OPTS[@]}" \
    -Xms256m -Xmx256m -XX:MaxDirectMemorySize=256m -XX:MaxMetaspaceSize=256m \
    -Djdk.net.hosts.file="$CONF/hosts-taskmanager-$1" -cp "$(flink_classpath)" \
    org.apache.flink.runtime.taskexecutor.TaskManagerRunner --configDir "$CONF" \
    -Dtaskmanager.resource-id="taskmanager-$1"
}
start_worker_pool() {  # start_worker_pool I
  # The pool starts each SDK worker with the `python` first on PATH: the venv's.
  PATH="$(dirname "$VENV_PYTHON"):$PATH" TF_CPP_MIN_LOG_LEVEL=3 \
    launch "worker-pool-$1" "$DIR/worker-pool-$1" \
    "$VENV_PYTHON" "$ROOT/scripts/flink/worker_pool.py" --address="$(pool_ip "$1"):$POOL_PORT"
}

# --- waiting ----------------------------------------------------------------------------------
registered_task_managers() {  # how many TaskManagers the REST API lists (nothing if it does not answer)
  curl -sf --max-time 5 "http://localhost:$REST_PORT/taskmanagers" 2>/dev/null |
    "$VENV_PYTHON" -c 'import json, sys; print(len(json.load(sys.stdin)["taskmanagers"]))' 2>/dev/null || true
}
listening() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
print_logs() {
  local file
  for file in "$LOGS"/*.log; do
    [ -f "$file" ] || continue
    echo "----- $file (last 40 lines)" >&2
    tail -n 40 "$file" >&2
  done
}
fail_start() {
  log "error: $1"
  print_logs
  stop
  exit 1
}
wait_until_up() {
  local deadline=$((SECONDS + TIMEOUT)) name count i up
  while :; do
    for name in $(members); do
      running_pid "$name" >/dev/null || fail_start "$name exited during start-up (log: $LOGS/$name.log)"
    done
    count="$(registered_task_managers)"
    up=1
    for i in $(seq "$TASK_MANAGERS"); do
      listening "$(pool_ip "$i")" "$POOL_PORT" || up=0
      # (The REST API may still list a TaskManager that was killed a moment ago.)
      grep -q "Successful registration at resource manager" "$LOGS/taskmanager-$i.log" || up=0
    done
    if [ "${count:-0}" -ge "$TASK_MANAGERS" ] && [ "$up" = 1 ]; then return 0; fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail_start "not up after ${TIMEOUT}s: the REST API lists ${count:-no} of $TASK_MANAGERS TaskManagers"
    fi
    sleep 0.5
  done
}

write_endpoints() {
  local i pools=""
  for i in $(seq "$TASK_MANAGERS"); do pools="$pools${pools:+,}$(pool_ip "$i"):$POOL_PORT"; done
  printf 'FLINK_REST=localhost:%s\nFLINK_ENVIRONMENT_CONFIG=%s:%s\nFLINK_WORKER_POOLS=%s\nFLINK_CLUSTER_DIR=%s\n' \
    "$REST_PORT" "$POOL_HOST" "$POOL_PORT" "$pools" "$DIR" > "$ENV_FILE"
}

start() {
  command -v java >/dev/null 2>&1 || { log "error: java is not on PATH (Java 11+, 17 recommended)"; exit 2; }
  command -v curl >/dev/null 2>&1 || { log "error: curl is not on PATH"; exit 2; }
  [ -x "$VENV_PYTHON" ] || { log "error: no $VENV_PYTHON: run scripts/test.sh or scripts/run_local.sh once"; exit 2; }
  LIB="$(find_lib)"
  mkdir -p "$PIDS" "$LOGS"
  local i rpc_port repair=""
  if running_pid jobmanager >/dev/null && [ -f "$PORTS_FILE" ]; then
    repair=1  # same configuration and ports
    read -r REST_PORT POOL_PORT TASK_MANAGERS < "$PORTS_FILE"
  else
    stop 2>/dev/null  # what is left of a cluster that died
    read -r REST_PORT rpc_port POOL_PORT <<< "$(choose_ports)"
    write_conf "$REST_PORT" "$rpc_port"
    echo "$REST_PORT $POOL_PORT $TASK_MANAGERS" > "$PORTS_FILE"
    rm -f "$LOGS"/*.log "$LOGS"/*.log.previous
    log "starting a JobManager and $TASK_MANAGERS TaskManagers, each with a worker pool, in $DIR"
    start_job_manager
  fi
  trap 'fail_start "interrupted"' INT TERM
  for i in $(seq "$TASK_MANAGERS"); do
    if ! running_pid "taskmanager-$i" >/dev/null; then
      # A TaskManager comes back with a fresh pool, as a restarted machine would: the old pool's
      # workers served the dead TaskManager.
      if [ -n "$repair" ]; then
        log "restarting taskmanager-$i and worker-pool-$i"
        end "taskmanager-$i" "worker-pool-$i"
      fi
      start_worker_pool "$i"
      start_task_manager "$i"
    elif ! running_pid "worker-pool-$i" >/dev/null; then
      log "restarting worker-pool-$i"
      end "worker-pool-$i"
      start_worker_pool "$i"
    fi
  done
  wait_until_up
  trap - INT TERM
  write_endpoints
  log "up: REST API at localhost:$REST_PORT, $TASK_MANAGERS TaskManagers registered (logs: $LOGS)"
  cat "$ENV_FILE"
}

status() {
  local name pid
  if [ -z "$(members 2>/dev/null)" ]; then echo "not running ($DIR)"; return 0; fi
  for name in $(members); do
    if pid="$(running_pid "$name")"; then echo "$name: running (pid $pid)"; else echo "$name: not running"; fi
  done
  if [ -f "$PORTS_FILE" ]; then
    read -r REST_PORT _ _ < "$PORTS_FILE"
    echo "TaskManagers registered: $(registered_task_managers)"
  fi
  if [ -f "$ENV_FILE" ]; then cat "$ENV_FILE"; fi
}

command="${1:-}"
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --task_managers=*) TASK_MANAGERS="${1#*=}" ;;
    --task_managers) TASK_MANAGERS="${2:-}"; shift ;;
    *) usage ;;
  esac
  shift
done
case "$TASK_MANAGERS" in
  ''|*[!0-9]*|0) log "error: the number of TaskManagers must be a whole number from 1 to 250"; exit 2 ;;
esac
[ "$TASK_MANAGERS" -le 250 ] || { log "error: at most 250 TaskManagers (one loopback address each)"; exit 2; }
case "$command" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
