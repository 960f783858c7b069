#!/usr/bin/env bash
# Run a command against a throwaway PostgreSQL server:
#   tests/helpers_reliability/postgres.sh .venv/bin/pytest -q
# Installs Debian's postgresql when missing, starts it on 127.0.0.1 on a free port in a
# temporary data folder (initdb as the `postgres` user when we run as root), runs the
# command with DATABASE_URL set, and stops the server and removes the folder after.
# fsync is off: these databases only have to survive killed processes, not power cuts.
set -euo pipefail

if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  echo "Installing Debian's postgresql" >&2
  SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
DATA=$(mktemp -d /tmp/pgtest.XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
if [ "$(id -u)" = 0 ]; then
  chown postgres "$DATA"
  AS=(runuser -u postgres --)
else
  AS=()
fi
stop() {
  "${AS[@]}" "$BIN/pg_ctl" -D "$DATA/db" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$DATA"
}
trap stop EXIT
"${AS[@]}" "$BIN/initdb" -D "$DATA/db" -U memory --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
"${AS[@]}" "$BIN/pg_ctl" -D "$DATA/db" -l "$DATA/server.log" -w \
  -o "-h 127.0.0.1 -p $PORT -k $DATA -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
  start >/dev/null
"${AS[@]}" "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U memory memory
echo "PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT" >&2
export DATABASE_URL="postgres://memory@127.0.0.1:$PORT/memory"
"$@"
