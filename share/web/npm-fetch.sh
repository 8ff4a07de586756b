#!/bin/sh
# share/web/npm-fetch.sh — fetch one npm tarball at build time and check it
# against its pinned integrity (npm's "sha512-<base64>" form, as the
# registry's dist.integrity gives it). A cached file that still matches is
# kept; nothing else is ever trusted.
#   npm-fetch.sh PACKAGE VERSION INTEGRITY OUT.tgz   (PACKAGE may be @scope/name)
set -eu
pkg=$1 ver=$2 want=$3 out=$4
registry=${NPM_REGISTRY:-https://registry.npmjs.org}

integrity() { printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

if [ -f "$out" ] && [ "$(integrity "$out")" = "$want" ]; then
	exit 0
fi
mkdir -p "$(dirname "$out")"
base=${pkg##*/}
url="$registry/$pkg/-/$base-$ver.tgz"
tmp="$out.part.$$"
trap 'rm -f "$tmp"' EXIT
if ! curl -fsSL --retry 2 -o "$tmp" "$url"; then
	echo "npm-fetch: cannot download $url (the npm registry must be reachable for the first build)" >&2
	exit 1
fi
got=$(integrity "$tmp")
if [ "$got" != "$want" ]; then
	echo "npm-fetch: $pkg@$ver: integrity $got, pinned $want: refusing it" >&2
	exit 1
fi
mv "$tmp" "$out"
