#!/usr/bin/env bash
# Regenerates docs/stats.png, the stats page screenshot the README shows.
#
# Starts a demo: a `--no-master` tollgate whose `return` routes stand in for four origins,
# and a tollgate in master mode in front of them (two backends, health checks, one server
# whose port nobody listens on, so it shows DOWN; `stats_auth` set, so the buttons show).
# Drains and puts in maintenance one server each with `tollgate ctl`, sends some traffic,
# then has headless Chromium load the page and take the screenshot. Everything it started is
# stopped on exit.
#
#   docs/screenshot.sh                     # builds target/debug/tollgate if missing
#   TOLLGATE=path/to/tollgate BASE_PORT=28000 docs/screenshot.sh
#
# Needs chromium (the distribution's package) and curl. Uses loopback ports BASE_PORT..+20.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${TOLLGATE:-target/debug/tollgate}
[ -x "$bin" ] || cargo build -p tollgate --bin tollgate
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
  || { echo "screenshot.sh: needs chromium" >&2; exit 1; }
command -v curl >/dev/null || { echo "screenshot.sh: needs curl" >&2; exit 1; }

base=${BASE_PORT:-28400}
admin=$((base + 9)) www=$((base + 10)) api=$((base + 11))
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The origins: one frontend per "server", each answering 200 itself.
for i in 1 2 3 4; do
  cat >>"$work/origins.toml" <<EOF
[[frontend]]
name = "origin-$i"
bind = ["127.0.0.1:$((base + i))"]
mode = "http"
[[frontend.route]]
path_prefix = "/"
return = { status = 200, body = "origin $i\n" }

EOF
done
"$bin" run --no-master --config "$work/origins.toml" 2>"$work/origins.log" &
pids+=($!)

cat >"$work/tollgate.toml" <<EOF
[global]
workers = 2
control_socket = "$work/ctl.sock"

[admin]
bind = "127.0.0.1:$admin"
stats_auth = "ops:demo"

[[frontend]]
name = "www"
bind = ["127.0.0.1:$www"]
mode = "http"
default_backend = "web"

[[frontend]]
name = "api"
bind = ["127.0.0.1:$api"]
mode = "http"
default_backend = "api"

[[backend]]
name = "web"
mode = "http"
[backend.health]
type = "tcp"
interval = "500ms"
[[backend.server]]
name = "web-1"
address = "127.0.0.1:$((base + 1))"
weight = 3
[[backend.server]]
name = "web-2"
address = "127.0.0.1:$((base + 2))"
[[backend.server]]
name = "web-3"
address = "127.0.0.1:$((base + 5))"

[[backend]]
name = "api"
mode = "http"
[backend.health]
type = "http"
path = "/health"
interval = "500ms"
[[backend.server]]
name = "api-1"
address = "127.0.0.1:$((base + 3))"
[[backend.server]]
name = "api-2"
address = "127.0.0.1:$((base + 4))"
EOF
"$bin" run --config "$work/tollgate.toml" 2>"$work/tollgate.log" &
pids+=($!)

ready=""
for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null -u ops:demo "http://127.0.0.1:$admin/stats.json" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "screenshot.sh: tollgate did not start:" >&2; cat "$work/tollgate.log" >&2; exit 1; }

ctl() { "$bin" ctl --socket "$work/ctl.sock" "$@" >/dev/null; }
ctl set server api/api-2 state maint
# Some traffic, then web-2 drains (it keeps its counts).
for _ in $(seq 1 120); do
  curl -s -o /dev/null "http://127.0.0.1:$www/"
  curl -s -o /dev/null "http://127.0.0.1:$api/v1/items"
done
ctl set server web/web-2 state drain
# Traffic while the page loads, so rates show.
(while :; do curl -s -o /dev/null "http://127.0.0.1:$www/"; curl -s -o /dev/null "http://127.0.0.1:$api/"; done) &
pids+=($!)
sleep 2

flags=(--headless --disable-gpu --disable-dev-shm-usage --no-first-run --hide-scrollbars
  --user-data-dir="$work/profile" --window-size=1400,470 --virtual-time-budget=5000)
[ "$(id -u)" -eq 0 ] && flags+=(--no-sandbox)
"$browser" "${flags[@]}" --screenshot="$PWD/docs/stats.png" \
  "http://ops:demo@127.0.0.1:$admin/stats" 2>"$work/chromium.log"
echo "docs/stats.png: $(wc -c <docs/stats.png) bytes"
