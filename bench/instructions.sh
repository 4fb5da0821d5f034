#!/usr/bin/env bash
# Instructions per request of a proxy under a bounded load, counted by callgrind: a figure
# that other work on the machine does not move (CPU time does), for comparing builds and
# against HAProxy while the machine is busy.
#
#   bench/instructions.sh h2 tollgate [REQUESTS]          # h2load -c10 -m10 over TLS (ALPN h2)
#   bench/instructions.sh h2 haproxy [REQUESTS]
#   bench/instructions.sh http-keepalive tollgate [REQUESTS]   # h2load --h1 -c50: wrk's load
#   bench/instructions.sh http-keepalive haproxy [REQUESTS]
#   bench/instructions.sh tcp-passthrough tollgate [REQUESTS]  # h2load --h1 -c50 through an L4 relay
#   bench/instructions.sh tcp-close tollgate [SECONDS]    # wrk -c50 'Connection: close' for SECONDS
#   PROXY_CMD='bench/uring-proto/target/release/uring-proto uring --listen 127.0.0.1:{{listen_port}}
#     --origin 127.0.0.1:{{origin_port}}' bench/instructions.sh tcp-close command   # any relay
#
# The proxy runs under `valgrind --tool=callgrind` with instrumentation off; after a warm-up
# load it is switched on for exactly the measured load and off again, so start-up, TLS
# certificate loading and shutdown are not counted. Printed: the user-space instructions
# of every thread of the proxy (kernel work is not counted) divided by the requests that
# completed. The measured load opens its own connections (10 TLS handshakes for h2), as a
# peerbench window does. Environment: TOLLGATE (binary, default target/release/tollgate),
# KEEP=1 keeps the work folder (the callgrind profile for callgrind_annotate).
# Needs valgrind, h2load, nginx (the origin), openssl; haproxy for that contestant.
# tollgate's configs are the peerbench templates in bench/peerbench/ (h2.toml, http.toml;
# TEMPLATE=NAME for bench/peerbench/NAME.toml instead, e.g. TEMPLATE=routes50/http;
# {{origin_pp_port}} is the origin's PROXY protocol listener, for TEMPLATE=limited/http;
# {{workdir}}, {{name}} and {{scenario}} place an access log in the work folder).
# tcp-close runs wrk for a time (wrk has no request count; it reconnects per request) and
# divides by the requests wrk completed: the <= 50 requests cut off at its end are noise
# below 1 % at the default 20 s. The `command` contestant runs PROXY_CMD (the template
# variables filled in), e.g. bench/uring-proto's relays; haproxy has no tcp template here.
set -euo pipefail

usage="usage: bench/instructions.sh h2|http-keepalive|tcp-passthrough|tcp-close tollgate|haproxy|command [REQUESTS|SECONDS]"
scenario=${1:?$usage}
contestant=${2:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
tollgate=${TOLLGATE:-$root/target/release/tollgate}
case $scenario in
    h2) requests=${3:-30000}; template=h2 ;;
    http-keepalive) requests=${3:-30000}; template=http ;;
    tcp-passthrough) requests=${3:-30000}; template=tcp ;;
    tcp-close) requests=${3:-20}; template=tcp ;;
    *) echo "unknown scenario $scenario" >&2; exit 2 ;;
esac
# TEMPLATE=routes50/http measures another tollgate config under the same load.
config_template=${TEMPLATE:-$template}

work=$(mktemp -d /tmp/tollgate-instructions.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        # Bounded: valgrind writes its profile on exit; 20 s then KILL.
        for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [[ ${KEEP:-0} == 1 ]]; then echo "work folder: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() {
    for _ in $(seq 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on port $1 after 60 s" >&2
    exit 1
}

origin_port=$(free_port)
origin_pp_port=$(free_port)
listen_port=$(free_port)

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=localhost \
    -keyout "$work/cert.key" -out "$work/cert.crt" 2>/dev/null
cat "$work/cert.crt" "$work/cert.key" >"$work/cert.pem"

# The origin: nginx answering `ok\n` (3 bytes) with keep-alive, as peerbench's.
mkdir -p "$work/nginx/logs"
cat >"$work/nginx/origin.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx/origin.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_timeout 120s;
    keepalive_requests 1000000000;
    server {
        listen 127.0.0.1:$origin_port backlog=4096;
        location = / { default_type text/plain; return 200 "ok\n"; }
    }
    # The same answer behind a PROXY protocol listener (templates with send_proxy).
    server {
        listen 127.0.0.1:$origin_pp_port proxy_protocol backlog=4096;
        location = / { default_type text/plain; return 200 "ok\n"; }
    }
}
EOF
nginx -p "$work/nginx" -e "$work/nginx/error.log" -c "$work/nginx/origin.conf" &
pids+=($!)
wait_port "$origin_port"

case $contestant in
    tollgate)
        sed -e "s|{{threads}}|1|g; s|{{listen_port}}|$listen_port|g; s|{{origin_port}}|$origin_port|g; s|{{origin_pp_port}}|$origin_pp_port|g" \
            -e "s|{{cert_crt}}|$work/cert.crt|g; s|{{cert_key}}|$work/cert.key|g" \
            -e "s|{{workdir}}|$work|g; s|{{name}}|tollgate|g; s|{{scenario}}|$scenario|g" \
            "$root/bench/peerbench/$config_template.toml" >"$work/proxy.toml"
        if grep -q '{{' "$work/proxy.toml"; then echo "unrendered placeholder in $config_template.toml" >&2; exit 1; fi
        "$tollgate" check --config "$work/proxy.toml" >/dev/null
        proxy=("$tollgate" run --no-master --config "$work/proxy.toml")
        ;;
    command)
        cmd=${PROXY_CMD:?PROXY_CMD: the command line of the contestant}
        cmd=${cmd//\{\{listen_port\}\}/$listen_port}
        cmd=${cmd//\{\{origin_port\}\}/$origin_port}
        read -r -a proxy <<<"$cmd"
        ;;
    haproxy)
        if [[ $template == tcp ]]; then echo "no tcp template for haproxy here" >&2; exit 2; fi
        # peerbench's haproxy templates (nbthread 1, http-reuse always).
        if [[ $template == h2 ]]; then
            bind="bind 127.0.0.1:$listen_port ssl crt $work/cert.pem alpn h2,http/1.1"
        else
            bind="bind 127.0.0.1:$listen_port"
        fi
        cat >"$work/proxy.cfg" <<EOF
global
    nbthread 1
    maxconn 7000
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    http-reuse always
frontend fe
    $bind
    default_backend be
backend be
    server origin 127.0.0.1:$origin_port
EOF
        haproxy -c -q -f "$work/proxy.cfg"
        proxy=(haproxy -db -f "$work/proxy.cfg")
        ;;
    *) echo "unknown contestant $contestant" >&2; exit 2 ;;
esac

valgrind --tool=callgrind --instr-atstart=no --vgdb=yes --callgrind-out-file="$work/callgrind.out" \
    "${proxy[@]}" 2>"$work/valgrind.log" &
proxy_pid=$!
pids+=("$proxy_pid")
wait_port "$listen_port"

# Every request must succeed: a failed one did work that the count would leave out.
succeeded() {
    grep -q ' 0 failed, 0 errored, 0 timeout' <<<"$1" || { echo "requests failed: $1" >&2; exit 1; }
    sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' <<<"$1"
}

# One load: prints the number of requests that completed with a 2xx.
load() {
    local n=$1 out
    if [[ $scenario == tcp-close ]]; then
        # $n seconds of wrk, a new connection per request; every request must succeed
        out=$(timeout $((n + 60)) wrk -t1 -c50 -d"${n}s" -H 'Connection: close' "http://127.0.0.1:$listen_port/")
        if grep -qE 'Socket errors|Non-2xx' <<<"$out"; then echo "requests failed: $out" >&2; exit 1; fi
        sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' <<<"$out"
    elif [[ $template == h2 ]]; then
        out=$(timeout 600 h2load -t1 -c10 -m10 -n "$n" "https://127.0.0.1:$listen_port/")
        grep -q 'Application protocol: h2' <<<"$out" || { echo "h2 not negotiated: $out" >&2; exit 1; }
        succeeded "$out"
    else
        # wrk's load (50 keep-alive connections, one request at a time on each), counted:
        # wrk runs for a time, h2load --h1 for a number of requests.
        out=$(timeout 600 h2load --h1 -t1 -c50 -n "$n" "http://127.0.0.1:$listen_port/")
        succeeded "$out"
    fi
}

if [[ $scenario == tcp-close ]]; then load 2 >/dev/null; else load 2000 >/dev/null; fi

callgrind_control -i on "$proxy_pid" >/dev/null
done_requests=$(load "$requests")
callgrind_control -i off "$proxy_pid" >/dev/null
callgrind_control -d "$proxy_pid" >/dev/null

# The dump just taken holds everything counted while instrumentation was on (its `totals:`
# line; `summary:` stays 0 when instrumentation starts off).
dump=$(ls -t "$work"/callgrind.out* | head -n 1)
instructions=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$dump" | tail -n 1)
if [[ -z $instructions || -z $done_requests || $done_requests -eq 0 ]]; then
    echo "no measurement (instructions '$instructions', requests '$done_requests')" >&2
    exit 1
fi
per=$(python3 -c "print(round($instructions / $done_requests))")
echo "$scenario $contestant: $per instructions/request ($instructions instructions, $done_requests requests)"
if [[ ${KEEP:-0} == 1 ]]; then echo "profile: $dump (callgrind_annotate --inclusive=yes $dump)" >&2; fi
