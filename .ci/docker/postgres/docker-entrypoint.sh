#!/bin/sh
# The official image's contract, small: a fresh cluster in $PGDATA whose TCP
# clients authenticate with POSTGRES_PASSWORD (SCRAM), or are trusted with
# POSTGRES_HOST_AUTH_METHOD=trust; then `postgres ARGS` as the postgres user.
set -eu
[ "${1:-}" = postgres ] && shift
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown postgres:postgres "$PGDATA"
  chmod 700 "$PGDATA"
  exec runuser -u postgres -- "$0" postgres "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ "${POSTGRES_HOST_AUTH_METHOD:-}" = trust ]; then
    initdb -D "$PGDATA" -U postgres --no-sync --no-locale -E UTF8 -A trust >/dev/null
    echo "host all all all trust" >>"$PGDATA/pg_hba.conf"
  else
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD or POSTGRES_HOST_AUTH_METHOD=trust}"
    pwfile=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" -U postgres --no-sync --no-locale -E UTF8 \
      --auth-local=trust --auth-host=scram-sha-256 --pwfile="$pwfile" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
