#!/usr/bin/env bash
# The container route on a machine with no image registry: installs Debian's
# docker.io and debootstrap if missing, starts dockerd (data under
# /var/tmp/ttl-docker, so images stay cached between runs on this machine),
# builds the local images (skipping those that exist), runs the given command
# with TTL_IMAGE_* pointing at them, then stops dockerd and puts back the host
# network settings it changed. Run as root.
#
#   bash .ci/docker.sh                 # images, then the CI checks below
#   bash .ci/docker.sh images          # images only
#   bash .ci/docker.sh -- CMD ARGS...  # images, then CMD
#
# With a dockerd that is already running (its socket answers), that daemon is
# used and left alone: nothing is stopped or restored.
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER_DIR="${TTL_DOCKER_DIR:-/var/tmp/ttl-docker}"
SOCK=/var/run/docker.sock
MIRROR="${TTL_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)}"
# The machine's own Debian mirror (never a host named here); TTL_DEBIAN_MIRROR overrides.
MIRROR="${MIRROR:-$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -1)}"
[[ -n $MIRROR ]] || { echo "docker.sh: no Debian mirror in /etc/apt/sources.list{,.d}; set TTL_DEBIAN_MIRROR" >&2; exit 1; }

started=$(date +%s)
say() { echo "-- docker [$(($(date +%s) - started))s] $*"; }

export TTL_IMAGE_VALKEY=local/valkey:ci
export TTL_IMAGE_POSTGRES=local/postgres:ci
export TTL_IMAGE_CASSANDRA=local/cassandra:ci
export TTL_IMAGE_ETCD=local/etcd:ci

# ---- packages ----
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v iptables >/dev/null || need+=(iptables)
if ((${#need[@]})); then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# ---- the daemon, and putting the host back afterwards ----
ours=false
if docker version >/dev/null 2>&1; then
  say "using the dockerd that is already running"
else
  ours=true
  saved_ip_forward=$(sysctl -n net.ipv4.ip_forward)
  saved_forward_policy=$(iptables -S FORWARD | sed -n 's/^-P FORWARD //p')
  had_docker0=false
  ip link show docker0 >/dev/null 2>&1 && had_docker0=true
fi

# Removes every rule that mentions a DOCKER chain or docker0 from `table`,
# then the DOCKER* chains themselves.
drop_docker_rules() {
  local table=$1 rule chain
  iptables -t "$table" -S | grep -E 'DOCKER|docker0' | grep '^-A ' | while read -r rule; do
    eval "iptables -t $table ${rule/#-A/-D}" || true
  done
  iptables -t "$table" -S | sed -n 's/^-N \(DOCKER[A-Z0-9-]*\)$/\1/p' | while read -r chain; do
    iptables -t "$table" -F "$chain" || true
  done
  iptables -t "$table" -S | sed -n 's/^-N \(DOCKER[A-Z0-9-]*\)$/\1/p' | while read -r chain; do
    iptables -t "$table" -X "$chain" || true
  done
}

cleanup() {
  local status=$?
  set +e
  # The xtask removes its containers itself: one left behind is a failure.
  if docker version >/dev/null 2>&1; then
    left=$(docker ps -aq --filter label=ttl-cluster.xtask=test-drivers)
    if [[ -n "$left" ]]; then
      echo "docker: containers left behind: $left" >&2
      $ours && docker rm -f $left >/dev/null
      ((status == 0)) && status=1
    fi
  fi
  if $ours; then
    say "stopping dockerd, restoring the host network"
    if [[ -f "$DOCKER_DIR/dockerd.pid" ]]; then
      pid=$(cat "$DOCKER_DIR/dockerd.pid")
      kill "$pid" 2>/dev/null
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    # dockerd leaves its network namespace (exec/netns/default) mounted
    findmnt -rn -o TARGET | grep "^$DOCKER_DIR/" | sort -r | while read -r m; do umount "$m"; done
    sysctl -qw net.ipv4.ip_forward="$saved_ip_forward"
    iptables -P FORWARD "${saved_forward_policy:-ACCEPT}"
    drop_docker_rules filter
    drop_docker_rules nat
    $had_docker0 || { ip link show docker0 >/dev/null 2>&1 && ip link del docker0; }
    rm -f "$SOCK"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if $ours; then
  mkdir -p "$DOCKER_DIR"
  say "starting dockerd (data in $DOCKER_DIR/data)"
  dockerd --data-root "$DOCKER_DIR/data" --exec-root "$DOCKER_DIR/exec" \
    --pidfile "$DOCKER_DIR/dockerd.pid" -H "unix://$SOCK" \
    >"$DOCKER_DIR/dockerd.log" 2>&1 &
  for _ in $(seq 1 150); do docker version >/dev/null 2>&1 && break; sleep 0.2; done
  docker version >/dev/null 2>&1 || { tail -20 "$DOCKER_DIR/dockerd.log" >&2; exit 1; }
fi

# ---- images ----
have() { docker image inspect "$1" >/dev/null 2>&1; }

if have local/debian:bookworm; then
  say "local/debian:bookworm exists"
else
  rootfs="$DOCKER_DIR/rootfs-bookworm"
  rm -rf "$rootfs"
  say "debootstrap --variant=minbase bookworm from $MIRROR"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$DOCKER_DIR/debootstrap.log" 2>&1 ||
    { tail -20 "$DOCKER_DIR/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - local/debian:bookworm >/dev/null
  rm -rf "$rootfs"
fi

# The Cassandra jars: the process route's (same version, same Maven fetch).
cassandra_version=$(sed -n 's/^const CASSANDRA_VERSION: &str = "\(.*\)";$/\1/p' xtask/src/engines/cassandra.rs)
cassandra_jars() {
  local lib="${CARGO_TARGET_DIR:-/var/tmp/ttl-cluster-target}/engines/cassandra/lib-$cassandra_version"
  if [[ -f "$lib/.complete" ]]; then
    echo "$lib"
    return
  fi
  lib="$DOCKER_DIR/cassandra-lib-$cassandra_version"
  if [[ ! -f "$lib/.complete" ]]; then
    local pom="$DOCKER_DIR/cassandra-pom"
    mkdir -p "$pom"
    cat >"$pom/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.ci</groupId><artifactId>cassandra-runtime</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies><dependency>
    <groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId>
    <version>$cassandra_version</version>
  </dependency></dependencies>
</project>
EOF
    rm -rf "$lib"
    (cd "$pom" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$lib") >&2
    touch "$lib/.complete"
  fi
  echo "$lib"
}

# recipe DIR [EXTRA]: a hash of .ci/docker/DIR's files (and EXTRA, e.g. a
# version), stored as the image's label: a changed recipe is rebuilt, an
# unchanged one is reused from the cache.
recipe() {
  { tar -C ".ci/docker/$1" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . ; echo "${2:-}"; } |
    sha256sum | cut -c1-16
}
# fresh IMAGE DIR [EXTRA]: the cached IMAGE was built from today's recipe.
fresh() {
  [[ "$(docker image inspect -f '{{ index .Config.Labels "ttl.recipe" }}' "$1" 2>/dev/null)" == "$(recipe "$2" "${3:-}")" ]]
}

# build IMAGE DIR CONTEXT [EXTRA]: docker build of .ci/docker/DIR, with the
# host's network for apt (the build's RUN steps reach the same Debian mirror
# the host uses), unless the cached image has today's recipe.
build() {
  local image=$1 dir=$2 context=$3 extra=${4:-}
  if fresh "$image" "$dir" "$extra"; then
    say "$image exists (recipe $(recipe "$dir" "$extra"))"
    return
  fi
  say "building $image (recipe $(recipe "$dir" "$extra"))"
  local log="$DOCKER_DIR/build-$dir.log"
  docker build --network host --label "ttl.recipe=$(recipe "$dir" "$extra")" -t "$image" \
    -f ".ci/docker/$dir/Dockerfile" "$context" >"$log" 2>&1 ||
    { tail -30 "$log" >&2; exit 1; }
}

build local/valkey:ci valkey .ci/docker/valkey
build local/postgres:ci postgres .ci/docker/postgres
build local/etcd:ci etcd .ci/docker/etcd
# The engines the container route runs here: Valkey and PostgreSQL by
# default (Cassandra runs natively in .ci/run; its image, built from the
# Maven jars with a JRE, and its container start cost CI ~2.5 min, so it is
# opt-in: TTL_DOCKER_ENGINES="valkey postgres cassandra").
docker_engines="${TTL_DOCKER_ENGINES:-valkey postgres}"
if [[ " $docker_engines " != *" cassandra "* && "${1:-}" != images ]]; then
  say "local/cassandra:ci not built (not in TTL_DOCKER_ENGINES)"
elif ! fresh local/cassandra:ci cassandra "$cassandra_version"; then
  lib=$(cassandra_jars)
  context="$DOCKER_DIR/cassandra-context"
  rm -rf "$context"
  mkdir -p "$context"
  cp -r .ci/docker/cassandra/. "$context/"
  cp -rl "$lib" "$context/lib" 2>/dev/null || cp -r "$lib" "$context/lib"
  build local/cassandra:ci cassandra "$context" "$cassandra_version"
  rm -rf "$context"
else
  say "local/cassandra:ci exists (recipe $(recipe cassandra "$cassandra_version"))"
fi
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^local/' | sed 's/^/   /'

# ---- what to run ----
if [[ "${1:-}" == images ]]; then
  exit 0
elif [[ "${1:-}" == -- ]]; then
  shift
  say "running $*"
  "$@"
else
  engine_args=()
  for engine in $docker_engines; do engine_args+=(--engine "$engine"); done
  say "cargo xtask test-drivers --docker ${engine_args[*]}"
  cargo xtask test-drivers --docker "${engine_args[@]}"
  say "docker-compose -f docker-compose.yml config -q"
  docker-compose -f docker-compose.yml config -q
  say "docker-compose --profile pg-example config -q"
  docker-compose -f docker-compose.yml --profile pg-example config -q
  say "bash .ci/compose-smoke.sh (the pg-example profile, started)"
  bash .ci/compose-smoke.sh
  say "bash .ci/deb-smoke.sh (vvm-host's .deb installed in a clean Debian container)"
  bash .ci/deb-smoke.sh
fi
say "done"
