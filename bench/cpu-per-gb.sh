#!/usr/bin/env bash
# CPU per GB of one large HTTP/1.1 download through a proxy pinned to one CPU:
#   bench/cpu-per-gb.sh [ROUNDS] [PULLS] [SIZE_MIB]        (defaults: 3 rounds, 30 pulls, 100 MiB)
# Contestants, each started fresh on CPU 1 in front of an nginx origin (CPU 0) that serves one
# SIZE_MIB file from a temporary directory:
#   tollgate-copy    target/release/tollgate --no-master, HTTP mode, no [frontend.splice]
#   tollgate-splice  the same with [frontend.splice] enabled, after_bytes = "64KiB"
#   haproxy          nbthread 1, mode http, http-reuse always, no splice
#   haproxy-splice   the same with option splice-request / splice-response
# A round pulls the file PULLS times with one curl on CPU 0 (one keep-alive connection; the
# first pull, outside the measurement, warms the server connection and the pipes) and reads
# the proxy's utime + stime from /proc/PID/stat before and after. Prints ms of proxy CPU per
# GB (10^9 bytes) for each round, and the median. Needs nginx, haproxy (optional), curl,
# taskset and a release build (`cargo build --release`). Touches nothing outside its
# temporary directory; uses loopback ports 18781-18783.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${1:-3}
PULLS=${2:-30}
SIZE_MIB=${3:-100}
ORIGIN_PORT=18781
PROXY_PORT=18782
BIN=target/release/tollgate
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release first" >&2; exit 1; }

work=$(mktemp -d /tmp/cpu-per-gb.XXXXXX)
# mktemp makes it 0700: nginx's worker (www-data when started as root) must read the file.
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/www" "$work/nginx"
head -c $((SIZE_MIB << 20)) /dev/urandom >"$work/www/big"
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server { listen 127.0.0.1:$ORIGIN_PORT; root $work/www; }
}
EOF
taskset -c 0 nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
pids+=($!)

tollgate_conf() {
  cat <<EOF
[global]
workers = 1
buffer_size = "64KiB"
[timeouts]
client = "60s"
server = "60s"
http_keep_alive = "60s"
[[frontend]]
name = "bench"
bind = ["127.0.0.1:$PROXY_PORT"]
mode = "http"
forwarded = "none"
default_backend = "origin"
$1
[[backend]]
name = "origin"
mode = "http"
[[backend.server]]
name = "nginx"
address = "127.0.0.1:$ORIGIN_PORT"
EOF
}
tollgate_conf "" >"$work/copy.toml"
tollgate_conf $'[frontend.splice]\nenabled = true\nafter_bytes = "64KiB"' >"$work/splice.toml"

haproxy_conf() {
  cat <<EOF
global
  nbthread 1
  maxconn 1000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
  $1
frontend bench
  bind 127.0.0.1:$PROXY_PORT
  default_backend origin
backend origin
  server nginx 127.0.0.1:$ORIGIN_PORT
EOF
}
haproxy_conf "" >"$work/haproxy.cfg"
haproxy_conf $'option splice-request\n  option splice-response' >"$work/haproxy-splice.cfg"

wait_port() {
  for _ in $(seq 200); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    sleep 0.05
  done
  echo "nothing answers on port $1" >&2
  return 1
}
wait_port "$ORIGIN_PORT"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
url="http://127.0.0.1:$PROXY_PORT/big"
urls=()
for _ in $(seq "$PULLS"); do urls+=(-o /dev/null "$url"); done

one_round() { # contestant -> ms per GB
  local name=$1 pid
  case $name in
    tollgate-copy) taskset -c 1 "$BIN" run --no-master -c "$work/copy.toml" 2>"$work/$name.log" & ;;
    tollgate-splice) taskset -c 1 "$BIN" run --no-master -c "$work/splice.toml" 2>"$work/$name.log" & ;;
    haproxy) taskset -c 1 haproxy -db -f "$work/haproxy.cfg" 2>"$work/$name.log" & ;;
    haproxy-splice) taskset -c 1 haproxy -db -f "$work/haproxy-splice.cfg" 2>"$work/$name.log" & ;;
  esac
  pid=$!
  wait_port "$PROXY_PORT"
  local got
  got=$(taskset -c 0 curl -s -o /dev/null -w '%{http_code} %{size_download}' "$url")
  if [ "$got" != "200 $((SIZE_MIB << 20))" ]; then
    echo "$name: the warm-up pull got '$got', not '200 $((SIZE_MIB << 20))'" >&2
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    return 1
  fi
  local before after
  before=$(ticks "$pid")
  taskset -c 0 curl -s "${urls[@]}"
  after=$(ticks "$pid")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  awk -v t=$((after - before)) -v hz="$hz" -v bytes=$((PULLS * (SIZE_MIB << 20))) \
    'BEGIN { printf "%.0f", t * 1000 / hz / (bytes / 1e9) }'
}

contestants=(tollgate-copy tollgate-splice)
command -v haproxy >/dev/null && contestants+=(haproxy haproxy-splice)
declare -A results
for round in $(seq "$ROUNDS"); do
  for c in "${contestants[@]}"; do
    ms=$(one_round "$c")
    results[$c]="${results[$c]:-} $ms"
    echo "round $round  $c  $ms ms/GB"
  done
done
echo "median of $ROUNDS rounds, $PULLS pulls of $SIZE_MIB MiB each (ms of proxy CPU per GB):"
for c in "${contestants[@]}"; do
  # shellcheck disable=SC2086
  med=$(printf '%s\n' ${results[$c]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "  $c  $med   [${results[$c]# }]"
done
