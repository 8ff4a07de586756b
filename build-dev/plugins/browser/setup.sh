#!/bin/sh
# plugins/browser/setup.sh — installs Chromium for the browser plugin with the image's package manager;
# installs nothing when a chromium binary is already there; on failure the reason is the last stderr line.

fail() { echo "$*" >&2; exit 1; }

have_chromium() {
  for b in /usr/lib/chromium/chromium /usr/lib/chromium-browser/chromium-browser \
           /usr/lib64/chromium-browser/chromium-browser chromium chromium-browser; do
    if command -v "$b" >/dev/null 2>&1; then echo "$(command -v "$b")"; return 0; fi
  done
  return 1
}

if found=$(have_chromium); then
  echo "browser: $found is already installed"
  exit 0
fi

pm="${PKG_MANAGER:-}"
if [ -z "$pm" ]; then
  for p in apt-get apk dnf yum microdnf; do
    if command -v "$p" >/dev/null 2>&1; then pm=$p; break; fi
  done
fi
[ -n "$pm" ] || fail "no package manager (apt-get, apk, dnf, yum, microdnf) to install chromium with"

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
  else fail "installing chromium needs root (or password-less sudo)"; fi
fi

case "$pm" in
  apt-get)
    export DEBIAN_FRONTEND=noninteractive
    opts="-o Acquire::Retries=1 -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30 -o Dpkg::Use-Pty=0"
    # shellcheck disable=SC2086
    $SUDO apt-get $opts update -qq </dev/null >&2 || fail "apt-get update failed (no network or no package source?)"
    # shellcheck disable=SC2086
    $SUDO apt-get $opts install -y -qq chromium </dev/null >&2 || fail "apt-get install chromium failed"
    ;;
  apk)
    $SUDO apk add --no-cache chromium </dev/null >&2 || fail "apk add chromium failed (no network or no package source?)"
    ;;
  dnf|yum|microdnf)
    $SUDO "$pm" install -y chromium </dev/null >&2 || fail "$pm install chromium failed (no network, or chromium needs EPEL on this image)"
    ;;
  *)
    fail "unknown package manager '$pm'"
    ;;
esac

found=$(have_chromium) || fail "chromium was installed but no chromium binary was found (a snap-only package?)"
echo "browser: installed $found"
exit 0
