#!/usr/bin/env bash
# Prepare this machine for Stepwise, idempotently:
#   1. find a Python >= 3.12 and create .venv with the project and its dev group installed
#      (pip >= 25.1, then pip install -e . --group dev);
#   2. install Prometheus (prometheus + promtool) and the ssh client from Debian's packages when missing,
#      and with --tests (make test) Chromium and sshd for the browser and tunnel tests;
#   3. migrate the database (SQLite under data/ unless DATABASE_URL says otherwise).
# Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\nbootstrap: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }
py_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }

find_python() {
  local cand
  for cand in python3.13 python3.12; do
    if have "$cand" && py_ok "$cand"; then command -v "$cand"; return 0; fi
  done
  for cand in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
    if [ -x "$cand" ] && py_ok "$cand"; then echo "$cand"; return 0; fi
  done
  if have python3 && py_ok python3; then command -v python3; return 0; fi
  return 1
}

apt_install() {
  # Installs Debian packages when we may; otherwise says exactly what to run, and stops.
  if is_root && have apt-get; then
    say "Installing $* (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "$@"
  elif have apt-get; then
    die "missing: $*. Run:  sudo apt-get update && sudo apt-get install -y $*  then run this again."
  else
    die "missing: $*, and this is not a Debian/Ubuntu system (no apt-get). Install $* with your package manager, then run this again."
  fi
}

# 1. Python and the virtual environment -------------------------------------------------------
if [ -x .venv/bin/python ] && py_ok .venv/bin/python; then
  :
else
  PYTHON=$(find_python) || die "no Python >= 3.12 found (looked for python3.13, python3.12, ~/.pyenv/versions/3.1[2-9]*, python3).
Install one, e.g.  apt-get install -y python3 python3-venv  (Debian 13 ships 3.13), then run this again."
  say "Creating .venv with $PYTHON ($("$PYTHON" -V 2>&1))"
  rm -rf .venv
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    ver=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${ver}-venv"
    "$PYTHON" -m venv .venv || die "could not create .venv with $PYTHON"
  fi
fi

stamp=.venv/.stepwise-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "Installing Stepwise and its dependencies into .venv"
  # Dependency groups ([dependency-groups] dev in pyproject.toml) need pip >= 25.1.
  if ! .venv/bin/python -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (25, 1))' 2>/dev/null; then
    .venv/bin/python -m pip install -q 'pip>=25.1'
  fi
  .venv/bin/python -m pip install -q -e . --group dev
  echo "$want" > "$stamp"
fi

# 2. Prometheus ---------------------------------------------------------------------------------
PROMETHEUS_BIN=${STEPWISE_PROMETHEUS_BIN:-prometheus}
if ! have "$PROMETHEUS_BIN" || ! have promtool; then
  apt_install prometheus
fi
have "$PROMETHEUS_BIN" || die "$PROMETHEUS_BIN is still not on PATH (set STEPWISE_PROMETHEUS_BIN to its full path)."
have promtool || die "promtool is still not on PATH; it ships with Debian's prometheus package."
# SSH tunnels to a job's Prometheus run the ssh client.
if ! have ssh; then
  apt_install openssh-client
fi
if [ "${1:-}" = "--tests" ]; then
  # Browser tests (tests/browser/) drive Debian's headless Chromium through Playwright; the tunnel tests
  # start a throwaway sshd on loopback. Only the test run needs them, not the app.
  if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium
  fi
  if [ ! -x /usr/sbin/sshd ]; then
    apt_install openssh-server
  fi
  # The real-capture test scrapes Debian's node_exporter (started by the test on a loopback port).
  if [ ! -x /usr/bin/prometheus-node-exporter ]; then
    apt_install prometheus-node-exporter
  fi
fi

# 3. Database -----------------------------------------------------------------------------------
say "Migrating the database"
.venv/bin/python manage.py migrate --noinput -v 0

say "Ready: $(.venv/bin/python -V), $("$PROMETHEUS_BIN" --version 2>&1 | head -1)"
