#!/usr/bin/env bash
# The SQL backends' test databases: PostgreSQL on 127.0.0.1:5432 (user postgres, trusted,
# database test) and MariaDB on 127.0.0.1:3306 (root without a password, database test),
# as the tests reach them by default. Each is left alone when it answers (or when its
# FENCELOCK_*_URL names another server); otherwise, as root, it is installed from Debian's
# packages when missing, configured that way and started. scripts/test.sh runs this first.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

root() { [ "$(id -u)" = 0 ]; }

wait_for() { # what, command...: up to 60 s
  local what=$1
  shift
  for _ in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "$what did not answer within 60 s" >&2
  return 1
}

postgres_answers() { psql -h 127.0.0.1 -U postgres -d test -Atc 'SELECT 1' >/dev/null 2>&1; }

postgres() {
  if [ -n "${FENCELOCK_POSTGRES_URL:-}" ] || postgres_answers; then return 0; fi
  if ! root; then
    echo "PostgreSQL does not answer on 127.0.0.1:5432 and we are not root to start it:" \
      "the PostgreSQL tests will say that they skip (set FENCELOCK_POSTGRES_URL)" >&2
    return 0
  fi
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "== installing postgresql"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -1)
  local hba=/etc/postgresql/$version/main/pg_hba.conf
  # The tests connect as postgres over loopback without a password.
  if ! grep -Eq '^host\s+all\s+all\s+127\.0\.0\.1/32\s+trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null ||
    pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  wait_for PostgreSQL psql -h 127.0.0.1 -U postgres -d postgres -Atc 'SELECT 1'
  if ! postgres_answers; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test'
  fi
  echo "== PostgreSQL $version started on 127.0.0.1:5432"
}

mariadb_answers() { mariadb -h 127.0.0.1 -uroot test -e 'SELECT 1' >/dev/null 2>&1; }

mariadb_server() {
  if [ -n "${FENCELOCK_MYSQL_URL:-}" ] || mariadb_answers; then return 0; fi
  if ! root; then
    echo "MariaDB does not answer on 127.0.0.1:3306 and we are not root to start it:" \
      "the MySQL tests will say that they skip (set FENCELOCK_MYSQL_URL)" >&2
    return 0
  fi
  if ! command -v mariadbd >/dev/null 2>&1; then
    echo "== installing mariadb-server"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null
  fi
  mkdir -p /run/mysqld
  chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_for MariaDB mariadb -uroot -e 'SELECT 1'
  # The tests connect as root over loopback without a password.
  mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password \
    USING PASSWORD(''); CREATE DATABASE IF NOT EXISTS test"
  wait_for MariaDB mariadb -h 127.0.0.1 -uroot test -e 'SELECT 1'
  echo "== MariaDB started on 127.0.0.1:3306"
}

postgres
mariadb_server
