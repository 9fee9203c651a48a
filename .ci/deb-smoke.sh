#!/usr/bin/env bash
# vvm-host's .deb, as `cargo xtask dist` builds it (here from the workspace's
# test build: no compile), installed in a clean Debian container (the local
# image .ci/docker.sh made with debootstrap): the binary runs, the man page
# is found, the completions are where the shells look. Run by .ci/docker.sh
# (dockerd up).
#
#   bash .ci/docker.sh -- bash .ci/deb-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."

dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
cargo xtask dist --from-test-build --out "$dist"
deb=$(basename "$(ls "$dist"/vvm-host_*_*.deb)")
echo "-- deb smoke: installing $deb in local/debian:bookworm"
docker run --rm --network host -v "$dist:/dist:ro" local/debian:bookworm sh -ec "
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends man-db /dist/$deb >/dev/null
  vvm-host --version
  vvm-host run --storage mem x true
  man -w vvm-host
  man -w vvm-host-run
  test -s /usr/share/bash-completion/completions/vvm-host
  test -s /usr/share/zsh/vendor-completions/_vvm-host
  test -s /usr/share/fish/vendor_completions.d/vvm-host.fish
  echo 'deb smoke: installed, ran, man pages and completions in place'
"
