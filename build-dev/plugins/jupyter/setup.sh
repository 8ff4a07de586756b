#!/bin/sh
# plugins/jupyter/setup.sh — makes sure the image can run the jupyter plugin: a python3 that imports
# ipykernel, and the shared libraries termd-jupyter links (libzmq, cJSON, libcrypto). Installs only what is
# missing with $PKG_MANAGER (apt-get, apk, dnf, yum, microdnf); exits 0, or non-zero with the reason as the
# last line on stderr. Env from termd: PLUGIN, SANDBOX_TYPE, PKG_MANAGER; TERMD_JUPYTER_PYTHON picks the python.

HERE=$(cd "$(dirname "$0")" && pwd)
LOG=$(mktemp 2>/dev/null || echo /tmp/termd-jupyter-setup.$$)
trap 'rm -f "$LOG"' EXIT

fail() { echo "$*" >&2; exit 1; }

# the interpreters termd-jupyter tries, in its order
candidates() {
  if [ -n "$TERMD_JUPYTER_PYTHON" ]; then echo "$TERMD_JUPYTER_PYTHON"; return; fi
  echo python3; echo /usr/bin/python3; echo /usr/local/bin/python3; echo python
}

find_kernel_python() {
  for p in $(candidates); do
    if command -v "$p" >/dev/null 2>&1 && \
       "$p" -c "import importlib.util as u,sys; sys.exit(0 if u.find_spec('ipykernel_launcher') else 3)" \
         >/dev/null 2>&1; then
      echo "$p"; return 0
    fi
  done
  return 1
}

# shared libraries of termd-jupyter that the loader cannot find (e.g. "libzmq.so.5")
missing_libs() {
  [ -x "$HERE/termd-jupyter" ] && command -v ldd >/dev/null 2>&1 || return 0
  ldd "$HERE/termd-jupyter" 2>/dev/null | awk '/not found/ {print $1}'
}

# package name for a missing library, per package manager
lib_pkg() {
  case "$1:$2" in
    libzmq*:apt-get) echo libzmq5 ;;          libzmq*:apk) echo libzmq ;;     libzmq*:*) echo zeromq ;;
    libcjson*:apt-get) echo libcjson1 ;;      libcjson*:apk) echo cjson ;;    libcjson*:*) echo cjson ;;
    libcrypto*:apt-get|libssl*:apt-get) echo libssl3 ;;
    libcrypto*:apk|libssl*:apk) echo libcrypto3 ;;
    libcrypto*:*|libssl*:*) echo openssl-libs ;;
  esac
}

PY=$(find_kernel_python)
LIBS=$(missing_libs)
if [ -n "$PY" ] && [ -z "$LIBS" ]; then
  echo "jupyter: $PY has ipykernel; nothing to install" >&2
  exit 0
fi

PM=${PKG_MANAGER-}
if [ -z "$PM" ]; then
  for m in apt-get apk dnf microdnf yum; do command -v "$m" >/dev/null 2>&1 && { PM=$m; break; }; done
fi
what="python3 with ipykernel"
[ -n "$PY" ] && what="the libraries $(echo $LIBS)"
[ -n "$PM" ] && command -v "$PM" >/dev/null 2>&1 || fail "$what is missing and no package manager was found (apt-get, apk, dnf, yum, microdnf)"
[ "$(id -u)" = 0 ] || fail "$what is missing and installing it with $PM needs root (running as uid $(id -u))"

PKGS=""
if [ -z "$PY" ]; then
  case "$PM" in
    apt-get) PKGS="python3 python3-ipykernel" ;;
    apk) PKGS="python3 py3-ipykernel" ;;
    *) PKGS="python3 python3-ipykernel" ;;
  esac
fi
for l in $LIBS; do PKGS="$PKGS $(lib_pkg "$l" "$PM")"; done

# bounded, so that a dead network never hangs the setup
T=""; command -v timeout >/dev/null 2>&1 && T="timeout 900"

reason() {  # the most telling line of the installer's log
  r=$(grep -E '^(E:|ERROR|Error|error:)' "$LOG" | tail -n 1)
  [ -n "$r" ] || r=$(grep -v '^[[:space:]]*$' "$LOG" | tail -n 1)
  echo "$r"
}

case "$PM" in
  apt-get)
    export DEBIAN_FRONTEND=noninteractive
    APTOPT="-o Acquire::Retries=1 -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o DPkg::Lock::Timeout=120"
    $T apt-get $APTOPT update >"$LOG" 2>&1
    upd=$?
    net=$(grep -E '^(W|E): (Failed to fetch|Some index files failed)|Temporary failure resolving|Could not resolve|Could not connect' "$LOG" | head -n 1)
    # ipykernel pulls python3-debugpy -> python3-pydevd -> gdb (about 55 MB); gdb-minimal provides gdb
    if [ -z "$PY" ] && ! dpkg-query -W -f='${Status}' gdb 2>/dev/null | grep -q 'ok installed' && \
       apt-cache show gdb-minimal >/dev/null 2>&1; then
      PKGS="$PKGS gdb-minimal"
    fi
    if ! $T apt-get $APTOPT install -y --no-install-recommends $PKGS >>"$LOG" 2>&1; then
      cat "$LOG" >&2
      if [ -n "$net" ] || [ $upd -ne 0 ]; then
        fail "apt-get could not reach the package repositories: ${net:-$(reason)}"
      fi
      fail "apt-get install $PKGS failed: $(reason)"
    fi ;;
  apk)
    if ! $T apk add --no-cache $PKGS >"$LOG" 2>&1; then
      cat "$LOG" >&2; fail "apk add $PKGS failed: $(reason)"
    fi ;;
  dnf|yum)
    if ! $T "$PM" install -y --setopt=install_weak_deps=False $PKGS >"$LOG" 2>&1; then
      cat "$LOG" >&2; fail "$PM install $PKGS failed: $(reason)"
    fi ;;
  microdnf)
    if ! $T microdnf install -y $PKGS >"$LOG" 2>&1; then
      cat "$LOG" >&2; fail "microdnf install $PKGS failed: $(reason)"
    fi ;;
  *) fail "unknown package manager: $PM" ;;
esac

PY=$(find_kernel_python) || fail "installed $PKGS but no python3 imports ipykernel yet (tried: $(candidates | tr '\n' ' '))"
LIBS=$(missing_libs)
[ -z "$LIBS" ] || fail "installed $PKGS but termd-jupyter still misses: $(echo $LIBS)"
echo "jupyter: installed $PKGS; kernel python: $PY" >&2
exit 0
