#!/usr/bin/env bash
# The pg-tenants example as docker-compose.yml runs it (profile pg-example):
# PostgreSQL, Valkey, three pods and a coordinator in containers, started on
# the local images, then the README's walkthrough (tenants, a bad id, a
# transaction) through the coordinator on 127.0.0.1:8080, then everything
# stopped and removed. Run by .ci/docker.sh (dockerd up, TTL_IMAGE_* set).
#
#   bash .ci/docker.sh -- bash .ci/compose-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
say() { echo "-- compose smoke [$(($(date +%s) - started))s] $*"; }
fail() { echo "compose smoke: $*" >&2; exit 1; }

: "${TTL_IMAGE_VALKEY:?run through .ci/docker.sh}" "${TTL_IMAGE_POSTGRES:?run through .ci/docker.sh}"
export TTL_IMAGE_VALKEY TTL_IMAGE_POSTGRES

# ---- the image: this host's binaries (no Rust base image to build from) ----
# The workspace's one test build makes pg-pod and pg-coordinator (its e2e
# tests spawn them); `build -p pg-tenants` would resolve features anew and
# recompile ~100 dependencies.
say "cargo test --workspace --no-run (pg-pod, pg-coordinator)"
cargo test -q --workspace --no-run
bin="${CARGO_TARGET_DIR:-target}/debug"
context=$(mktemp -d)
cp .ci/docker/pg-tenants/Dockerfile "$bin/pg-pod" "$bin/pg-coordinator" "$context/"
say "building ttl-cluster/pg-tenants from $bin"
docker build -q --network host -t ttl-cluster/pg-tenants "$context" >/dev/null
rm -rf "$context"

# ---- the fleet ----
compose=(docker-compose -p ttl-pg-smoke -f docker-compose.yml --profile pg-example)
services=(postgres valkey pg-pod-1 pg-pod-2 pg-pod-3 pg-coordinator)
down() {
  local status=$?
  if ((status != 0)); then
    "${compose[@]}" ps >&2 || true
    "${compose[@]}" logs --no-color --tail 30 >&2 || true
  fi
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  exit "$status"
}
trap down EXIT
say "docker-compose up ${services[*]}"
"${compose[@]}" up -d --no-build "${services[@]}" 2>&1 | sed 's/^/   /'

base=http://127.0.0.1:8080
# call METHOD PATH [BODY]: prints the body, then the status on its own line
call() {
  curl -s -m 10 -X "$1" -w '\n%{http_code}' ${3+-d "$3"} "$base$2"
}
expect() { # expect STATUS METHOD PATH [BODY]; the body is left in $body
  local out status
  out=$(call "${@:2}") || fail "$2 $3: no answer"
  status=${out##*$'\n'}
  body=${out%$'\n'*}
  [[ "$status" == "$1" ]] || fail "$2 $3: status $status, want $1: $body"
}

say "waiting for the coordinator to list three pods"
for i in $(seq 1 120); do
  pods=$(curl -s -m 2 "$base/pods" || true)
  [[ $(grep -o '"id":"pod-[0-9]"' <<<"$pods" | sort -u | wc -l) == 3 ]] && break
  ((i == 120)) && fail "the coordinator did not list three pods in 60 s: ${pods:-no answer}"
  sleep 0.5
done
echo "   $pods"

say "the README's walkthrough"
for t in acme globex initech; do
  expect 200 PUT "/tenants/$t/kv/greeting" "hello $t"
done
expect 200 GET /tenants/acme/kv/greeting
grep -q '"value":"hello acme"' <<<"$body" || fail "acme's greeting: $body"
owner=$(sed -E 's/.*"pod":"(pod-[0-9])".*/\1/' <<<"$body")
expect 200 GET /tenants/acme/kv/greeting
grep -q "\"pod\":\"$owner\"" <<<"$body" || fail "acme moved from $owner without a fault: $body"
expect 400 GET /tenants/bad.id/kv/x
expect 201 POST /tenants/acme/transactions
lock=$(sed -nE 's/.*"lock":"([0-9a-f]+)".*/\1/p' <<<"$body")
[[ -n "$lock" ]] || fail "no lock id in $body"
expect 200 PUT "/transactions/$lock/kv/a" 1
expect 200 PUT "/transactions/$lock/kv/b" 2
expect 404 GET /tenants/acme/kv/a
expect 200 POST "/transactions/$lock/commit"
expect 200 GET /tenants/acme/kv/a
grep -q '"value":"1"' <<<"$body" || fail "committed value: $body"
say "ok: three pods listed, tenants routed and sticky, 400 on a bad id, a transaction committed"
