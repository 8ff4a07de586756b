#!/bin/sh
# plugins/agentskills/setup.sh — installs the Python libraries of agentskills' document readers (pypdf,
# python-docx, pylatexenc) where the image's package manager has them. A reader whose library cannot be
# installed only says so when called, so this never fails the plugin for a missing reader; it fails only
# when the module's own folder is missing. Env from termd: PLUGIN, SANDBOX_TYPE, PKG_MANAGER.

HERE=$(cd "$(dirname "$0")" && pwd)
[ -f "$HERE/python/agentskills/__init__.py" ] || { echo "agentskills module missing: $HERE/python/agentskills/__init__.py" >&2; exit 1; }

candidates() {
  if [ -n "$TERMD_JUPYTER_PYTHON" ]; then echo "$TERMD_JUPYTER_PYTHON"; return; fi
  echo python3; echo /usr/bin/python3; echo /usr/local/bin/python3; echo python
}
PY=""
for p in $(candidates); do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "import ipykernel_launcher" >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || PY=$(command -v python3 2>/dev/null)

# module:apt-get package:apk package:dnf package (the apk and dnf names are not verified)
READERS="pypdf:python3-pypdf:py3-pypdf:python3-pypdf docx:python3-docx:py3-docx-openxml:python3-docx pylatexenc:python3-pylatexenc:py3-pylatexenc:python3-pylatexenc"

PM=${PKG_MANAGER-}
if [ -z "$PM" ]; then
  for m in apt-get apk dnf microdnf yum; do command -v "$m" >/dev/null 2>&1 && { PM=$m; break; }; done
fi

want=""
for r in $READERS; do
  mod=${r%%:*}
  if [ -n "$PY" ] && "$PY" -c "import $mod" >/dev/null 2>&1; then continue; fi
  case "$PM" in
    apt-get) pkg=$(echo "$r" | cut -d: -f2) ;;
    apk) pkg=$(echo "$r" | cut -d: -f3) ;;
    dnf|yum|microdnf) pkg=$(echo "$r" | cut -d: -f4) ;;
    *) pkg="" ;;
  esac
  want="$want $mod:$pkg"
done
if [ -z "$want" ]; then echo "agentskills: all readers' libraries are there; nothing to install" >&2; exit 0; fi
if [ -z "$PM" ] || ! command -v "$PM" >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "agentskills: cannot install the readers' libraries (no package manager or not root):$want; those readers will say so when called" >&2
  exit 0
fi

T=""; command -v timeout >/dev/null 2>&1 && T="timeout 600"
export DEBIAN_FRONTEND=noninteractive
[ "$PM" = apt-get ] && $T apt-get -o Acquire::Retries=1 -o DPkg::Lock::Timeout=120 update >/dev/null 2>&1
# one package at a time: a package the distribution lacks must not stop the others
for w in $want; do
  mod=${w%%:*}; pkg=${w#*:}
  [ -n "$pkg" ] || continue
  case "$PM" in
    apt-get) $T apt-get -o DPkg::Lock::Timeout=120 install -y --no-install-recommends "$pkg" >/dev/null 2>&1 ;;
    apk) $T apk add --no-cache "$pkg" >/dev/null 2>&1 ;;
    dnf|yum) $T "$PM" install -y --setopt=install_weak_deps=False "$pkg" >/dev/null 2>&1 ;;
    microdnf) $T microdnf install -y "$pkg" >/dev/null 2>&1 ;;
  esac && echo "agentskills: installed $pkg" >&2 || echo "agentskills: could not install $pkg; the reader needing $mod will say so" >&2
done
exit 0
