#!/usr/bin/env bash
# Installs the system packages the tests need, if missing. Idempotent.
set -euo pipefail
need=()
command -v java >/dev/null || need+=(default-jre-headless)
command -v mvn >/dev/null || need+=(maven)
# Valkey itself on the process route (bookworm-backports packages it; the
# container route's image keeps Debian's Redis 7, so CI runs both servers).
need_valkey=
command -v valkey-server >/dev/null || need_valkey=1
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v openssl >/dev/null || need+=(openssl)   # throwaway CAs for the TLS cases
command -v etcd >/dev/null || need+=(etcd-server)
command -v protoc >/dev/null || need+=(protobuf-compiler)   # etcd-client's build script
command -v mold >/dev/null || need+=(mold)   # .ci/run links the ~90 test binaries with mold
command -v iptables >/dev/null || need+=(iptables)   # chaos on cassandra-3 cuts single nodes off
# The kube engine checks kube-apiserver's readiness and grants its Role
# with curl; kube-apiserver is built from source with Go (1.24 or later;
# /usr/local/go here, newer than Debian's): the xtask names what is missing.
command -v curl >/dev/null || need+=(curl)
command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]] \
  || echo "install-deps: no Go toolchain: the kube engine cannot build kube-apiserver" >&2
# The coordinator's routing bench compares against nginx (proxy_pass); the
# bench starts its own nginx (one worker, master_process off).
command -v nginx >/dev/null || need+=(nginx-light)
# vvm-host's containment tests (root step) run vvm-host under a supervisor
# that adopts orphans (tini -s), and as an unprivileged user in a cgroup
# delegated to it (the user is made here; the test makes it too if missing)
command -v tini >/dev/null || need+=(tini)
# The pg-example's browser test (cargo xtask test-drivers, the pg-example
# row) drives headless Chromium over the DevTools protocol; without it the
# row fails under CI=true rather than skip the test.
command -v chromium >/dev/null || need+=(chromium)
# chaos's clock-rate fault runs one contender under libfaketime, and its
# server clock fault the PostgreSQL server (Valkey: a shim built with cc)
[[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]] || need+=(libfaketime)
# test-drivers' postgres-pgbouncer row: the suite through PgBouncer
command -v pgbouncer >/dev/null || need+=(pgbouncer)
# The container route in CI (.ci/docker.sh): a Docker engine, a Debian base
# image built with debootstrap, docker-compose to validate docker-compose.yml.
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
# Packages must not start their own daemons (redis on 6379, etcd on 2379,
# postgresql): the tests start every server themselves, on ports of their
# own. policy-rc.d answering 101 forbids it, for this install only.
policy=/usr/sbin/policy-rc.d
own_policy=
if [[ ! -e $policy ]] && { ((${#need[@]})) || [[ -n $need_valkey ]]; }; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  own_policy=1
  trap 'rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
if ((${#need[@]})); then
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
if [[ -n $need_valkey ]]; then
  if grep -q '^VERSION_CODENAME=bookworm' /etc/os-release; then
    backports=/etc/apt/sources.list.d/bookworm-backports.sources
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      # The same mirror the machine's bookworm sources use (never a host named here).
      mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
      mirror=${mirror:-$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -1)}
      [[ -n $mirror ]] || { echo "install-deps: no Debian mirror configured in /etc/apt" >&2; exit 1; }
      cat >"$backports" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    fi
    apt-get update -qq
    apt-get install -y -qq -t bookworm-backports valkey-server
  else
    apt-get update -qq
    apt-get install -y -qq valkey-server
  fi
fi
[[ -z $own_policy ]] || rm -f "$policy"
if [[ $(id -u) == 0 ]] && ! id -u vvm-host-test >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin vvm-host-test
fi
valkey-server --version
java -version 2>&1 | head -1
