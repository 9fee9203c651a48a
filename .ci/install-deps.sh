#!/usr/bin/env bash
# Installs the system packages the tests need, if missing. Idempotent.
set -euo pipefail
need=()
command -v java >/dev/null || need+=(default-jre-headless)
command -v mvn >/dev/null || need+=(maven)
command -v redis-server >/dev/null || command -v valkey-server >/dev/null || need+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
command -v openssl >/dev/null || need+=(openssl)   # throwaway CAs for the TLS cases
command -v etcd >/dev/null || need+=(etcd-server)
command -v protoc >/dev/null || need+=(protobuf-compiler)   # etcd-client's build script
command -v iptables >/dev/null || need+=(iptables)   # chaos on cassandra-3 cuts single nodes off
# The container route in CI (.ci/docker.sh): a Docker engine, a Debian base
# image built with debootstrap, docker-compose to validate docker-compose.yml.
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
if ((${#need[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}"
fi
java -version 2>&1 | head -1
