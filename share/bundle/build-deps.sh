#!/bin/sh
# share/bundle/build-deps.sh — builds termd's libraries (OpenSSL, libwebsockets, nghttp2, libvterm, cJSON,
# ncursesw, zlib) as static musl archives from Debian's source packages, pinned to the versions the normal
# build links against, into a cache: CACHE/musl -> CACHE/prefix-<key> (lib/*.a, include/).
# Usage: build-deps.sh CACHE_DIR     (env BUNDLE_JOBS: make -j for OpenSSL/ncurses, default 1)
# A second run with the same versions does nothing but check the stamp.
set -eu

CACHE=${1:?usage: build-deps.sh CACHE_DIR}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
JOBS=${BUNDLE_JOBS:-1}

die() { echo "build-deps: $*" >&2; exit 1; }
log() { echo "build-deps: $*" >&2; }

command -v musl-gcc >/dev/null || die "musl-gcc not found (apt-get install musl-tools; make deps)"

# source package and the -dev package whose installed version pins it
PKGS="cjson:libcjson-dev libvterm:libvterm-dev libwebsockets:libwebsockets-dev ncurses:libncurses-dev openssl:libssl-dev zlib:zlib1g-dev nghttp2:libnghttp2-dev"

# The recipe is part of the key: a change to this script rebuilds.
RECIPE=$(cksum < "$0" | cut -d' ' -f1)
WANT=""
for pd in $PKGS; do
	src=${pd%%:*} dev=${pd#*:}
	v=$(dpkg-query -W -f='${source:Version}' "$dev" 2>/dev/null) || die "$dev is not installed (make deps)"
	[ -n "$v" ] || die "$dev is not installed (make deps)"
	WANT="$WANT $src=$v"
done
KEY=$(echo "$RECIPE$WANT" | cksum | cut -d' ' -f1)
PREFIX=$CACHE/prefix-$KEY
if [ -f "$PREFIX/.done" ]; then
	[ "$(readlink "$CACHE/musl" 2>/dev/null)" = "prefix-$KEY" ] || ln -sfn "prefix-$KEY" "$CACHE/musl"
	exit 0
fi
log "building static musl libraries for:$WANT (into $PREFIX)"
T0=$(date +%s)

# --- sources: a private apt configuration with deb-src lines (the system's sources are not touched)
APTD=$CACHE/apt
mkdir -p "$APTD/srcparts" "$APTD/lists/partial" "$APTD/cache/archives/partial" "$CACHE/src"
: > "$APTD/srcparts/src.sources.new"
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] || continue
	# only Debian's own archive: deb-src for every stanza that names deb.debian.org (or a Debian mirror)
	awk 'BEGIN{RS=""; ORS="\n\n"} /URIs:[^\n]*debian/ { gsub(/Types: deb\n/, "Types: deb-src\n"); print }' "$f" \
		>> "$APTD/srcparts/src.sources.new"
done
if [ -f /etc/apt/sources.list ]; then
	sed -n 's/^deb \(.*debian.*\)/deb-src \1/p' /etc/apt/sources.list > "$APTD/srcparts/list.list"
	[ -s "$APTD/srcparts/list.list" ] || rm -f "$APTD/srcparts/list.list"
fi
mv "$APTD/srcparts/src.sources.new" "$APTD/srcparts/src.sources"
[ -s "$APTD/srcparts/src.sources" ] || rm -f "$APTD/srcparts/src.sources"
APTO="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$APTD/srcparts -o Dir::State::Lists=$APTD/lists
 -o Dir::Cache=$APTD/cache -o APT::Sandbox::User=root -o Acquire::Retries=3"
UPDATED=0
apt_update() {
	[ $UPDATED = 1 ] && return 0
	# shellcheck disable=SC2086
	apt-get $APTO -qq update >/dev/null 2>"$CACHE/apt-update.log" \
		|| die "apt-get update with deb-src lines failed: $(tail -3 "$CACHE/apt-update.log")"
	UPDATED=1
}

# fetch SRC VERSION: the Debian source package unpacked (patches applied) into $CACHE/src/SRC-VERSION.
# If the pinned version is no longer on the mirror, or its .dsc is missing, take the newest version
# with a complete download, or else the newest orig tarball (upstream source without Debian's patches).
SRCDIR=""
fetch() {
	src=$1 ver=$2 dir=$CACHE/src/$1-$2
	if [ -f "$dir/.unpacked" ]; then SRCDIR=$dir; return 0; fi
	apt_update
	# shellcheck disable=SC2086
	avail=$(apt-cache $APTO showsrc "$src" 2>/dev/null | sed -n 's/^Version: //p' | sort -u)
	[ -n "$avail" ] || die "no source package $src on the mirror"
	cands=$ver
	for a in $(echo "$avail" | sort -r -V); do [ "$a" = "$ver" ] || cands="$cands $a"; done
	for c in $cands; do
		echo "$avail" | grep -qxF "$c" || { log "$src $c (installed) has no source on the mirror any more"; continue; }
		dl=$CACHE/src/dl-$src-$c
		rm -rf "$dl"; mkdir -p "$dl"
		# shellcheck disable=SC2086
		(cd "$dl" && apt-get $APTO -qq source --download-only "$src=$c" >/dev/null 2>"$dl/.log") || true
		upv=${c#*:}; upv=${upv%-*}
		orig=$(ls "$dl"/"${src}_${upv}".orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
		[ -n "$orig" ] || { log "$src $c: download failed: $(tail -2 "$dl/.log" | tr '\n' ' ')"; continue; }
		dir=$CACHE/src/$src-$c
		rm -rf "$dir"
		dsc=$(ls "$dl"/*.dsc 2>/dev/null | head -1 || true)
		if [ -n "$dsc" ] && ls "$dl"/*.debian.tar.* >/dev/null 2>&1; then
			dpkg-source --no-check -x "$dsc" "$dir" >"$dl/.xlog" 2>&1 || die "dpkg-source -x $dsc failed: $(tail -3 "$dl/.xlog")"
		else
			log "$src $c: no .dsc/debian tarball on the mirror; building the orig tarball without Debian's patches"
			mkdir -p "$dir" && tar -C "$dir" --strip-components=1 -xf "$orig"
		fi
		[ "$c" = "$ver" ] || log "$src: using $c instead of the installed $ver"
		echo "$src=$c" > "$dir/.unpacked"
		rm -rf "$dl" "$CACHE/src/${src}_"*
		SRCDIR=$dir
		return 0
	done
	die "could not fetch any version of $src (wanted $ver)"
}

# --- toolchain: musl-gcc sees no kernel headers; libwebsockets needs <linux/...>
K=$CACHE/kheaders
mkdir -p "$K"
for h in /usr/include/linux /usr/include/x86_64-linux-gnu/asm /usr/include/asm-generic; do
	[ -e "$K/$(basename "$h")" ] || ln -s "$h" "$K/$(basename "$h")"
done
CC="musl-gcc -isystem $K"
OPT="-Os -ffunction-sections -fdata-sections"
rm -rf "$PREFIX"
mkdir -p "$PREFIX/lib" "$PREFIX/include"
B=$CACHE/work
rm -rf "$B"; mkdir -p "$B"
VERS=""

ver_of() { for w in $WANT; do [ "${w%%=*}" = "$1" ] && echo "${w#*=}"; done; }
step() { log "$1 ($(( $(date +%s) - T0 )) s)"; }

# cJSON: one file
fetch cjson "$(ver_of cjson)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "cJSON"
$CC $OPT -c "$SRCDIR/cJSON.c" -o "$B/cJSON.o"
ar rcs "$PREFIX/lib/libcjson.a" "$B/cJSON.o"
mkdir -p "$PREFIX/include/cjson"
cp "$SRCDIR/cJSON.h" "$PREFIX/include/cjson/cJSON.h"
cp "$SRCDIR/cJSON.h" "$PREFIX/include/cJSON.h"

# zlib: the OpenHands API's zip files (termd/zip.c)
fetch zlib "$(ver_of zlib)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "zlib"
(cd "$SRCDIR" && CC="$CC" CFLAGS="$OPT" ./configure --static --prefix="$PREFIX" >"$B/zlib.log" 2>&1 \
	&& make -j"$JOBS" libz.a >>"$B/zlib.log" 2>&1 && make install >>"$B/zlib.log" 2>&1) \
	|| die "zlib build failed: $(tail -5 "$B/zlib.log")"

# nghttp2: the library only (termd's front speaks HTTP/2 with it: termd/net/front/h2.c)
fetch nghttp2 "$(ver_of nghttp2)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "nghttp2"
command -v cmake >/dev/null || die "cmake not found (make deps)"
GEN="Unix Makefiles"; command -v ninja >/dev/null && GEN=Ninja
(cmake -S "$SRCDIR" -B "$B/nghttp2" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=musl-gcc \
	-DCMAKE_C_FLAGS="-isystem $K $OPT" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib \
	-DENABLE_LIB_ONLY=ON -DENABLE_STATIC_LIB=ON -DENABLE_SHARED_LIB=OFF -DENABLE_DOC=OFF \
	-DENABLE_PYTHON_BINDINGS=OFF -DWITH_LIBXML2=OFF -DWITH_JEMALLOC=OFF >"$B/nghttp2.log" 2>&1 \
	&& cmake --build "$B/nghttp2" -j "$JOBS" >>"$B/nghttp2.log" 2>&1 \
	&& cmake --install "$B/nghttp2" >>"$B/nghttp2.log" 2>&1) \
	|| die "nghttp2 build failed: $(tail -5 "$B/nghttp2.log")"

# libvterm: the .inc tables are in the tarball
fetch libvterm "$(ver_of libvterm)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "libvterm"
mkdir -p "$B/vterm"
for f in "$SRCDIR"/src/*.c; do
	$CC $OPT -std=c99 -I"$SRCDIR/include" -c "$f" -o "$B/vterm/$(basename "$f" .c).o"
done
ar rcs "$PREFIX/lib/libvterm.a" "$B"/vterm/*.o
cp "$SRCDIR"/include/*.h "$PREFIX/include/"

# OpenSSL: TLS 1.2/1.3 with the usual ciphers; legacy ciphers, engines and DSOs left out.
# --openssldir=/etc/ssl: the default CA file/dir where most images keep them.
fetch openssl "$(ver_of openssl)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "OpenSSL (the longest step)"
(cd "$SRCDIR" && make -s clean >/dev/null 2>&1 || true)
(cd "$SRCDIR" && CC="$CC" ./Configure linux-x86_64 no-shared no-tests no-engine no-afalgeng no-async no-comp \
	no-dso no-legacy no-ssl3 no-idea no-seed no-camellia no-aria no-sm2 no-sm3 no-sm4 no-whirlpool no-md4 \
	no-mdc2 no-rc2 no-rc4 no-rc5 no-bf no-cast no-des no-srp no-cms no-ts -DOPENSSL_SMALL_FOOTPRINT $OPT \
	--prefix="$PREFIX" --libdir=lib --openssldir=/etc/ssl >"$B/openssl.log" 2>&1 \
	&& make -j"$JOBS" build_libs >>"$B/openssl.log" 2>&1 && make install_dev >>"$B/openssl.log" 2>&1) \
	|| die "OpenSSL build failed: $(tail -5 "$B/openssl.log")"

# libwebsockets: no zlib, no libcap, no extensions (termd uses none of them)
fetch libwebsockets "$(ver_of libwebsockets)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "libwebsockets"
command -v cmake >/dev/null || die "cmake not found (make deps)"
GEN="Unix Makefiles"; command -v ninja >/dev/null && GEN=Ninja
(cmake -S "$SRCDIR" -B "$B/lws" -G "$GEN" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=musl-gcc \
	-DCMAKE_C_FLAGS="-isystem $K $OPT -Wno-error=deprecated-declarations" -DCMAKE_INSTALL_PREFIX="$PREFIX" \
	-DLWS_WITH_SHARED=OFF -DLWS_WITH_STATIC=ON -DLWS_WITHOUT_TESTAPPS=ON -DLWS_UNIX_SOCK=ON -DLWS_IPV6=ON \
	-DLWS_WITH_SSL=ON -DLWS_OPENSSL_INCLUDE_DIRS="$PREFIX/include" \
	-DLWS_OPENSSL_LIBRARIES="$PREFIX/lib/libssl.a;$PREFIX/lib/libcrypto.a" -DLWS_WITH_ZLIB=OFF \
	-DLWS_WITHOUT_EXTENSIONS=ON -DLWS_HAVE_LIBCAP=OFF -DLWS_WITH_MINIMAL_EXAMPLES=OFF \
	-DLWS_WITHOUT_TEST_SERVER=ON -DLWS_WITHOUT_TEST_CLIENT=ON >"$B/lws.log" 2>&1 \
	&& cmake --build "$B/lws" -j "$JOBS" >>"$B/lws.log" 2>&1 && cmake --install "$B/lws" >>"$B/lws.log" 2>&1) \
	|| die "libwebsockets build failed: $(tail -5 "$B/lws.log")"

# ncursesw: no terminfo database of its own; the common terminals compiled in as fallbacks
# (with the host's tic), the usual terminfo directories searched at run time.
fetch ncurses "$(ver_of ncurses)"; VERS="$VERS $(cat "$SRCDIR/.unpacked")"
step "ncurses"
mkdir -p "$B/ncurses"
(cd "$B/ncurses" && CC="$CC" CFLAGS="$OPT" "$SRCDIR/configure" --prefix="$PREFIX" --enable-widec \
	--without-shared --without-cxx --without-cxx-binding --without-ada --without-progs --without-tests \
	--without-manpages --disable-db-install --without-debug --enable-overwrite=no \
	--with-fallbacks=xterm-256color,xterm,screen-256color,screen,tmux-256color,tmux,linux,vt100,vt220 \
	--with-terminfo-dirs=/etc/terminfo:/lib/terminfo:/usr/share/terminfo:/usr/lib/terminfo \
	--with-default-terminfo-dir=/usr/share/terminfo >"$B/ncurses.log" 2>&1 \
	&& make -j"$JOBS" libs >>"$B/ncurses.log" 2>&1 && make install.libs install.includes >>"$B/ncurses.log" 2>&1) \
	|| die "ncurses build failed: $(tail -5 "$B/ncurses.log")"

echo "$VERS" | tr ' ' '\n' | sed '/^$/d' > "$PREFIX/VERSIONS"
rm -rf "$B"
touch "$PREFIX/.done"
ln -sfn "prefix-$KEY" "$CACHE/musl"
# older prefixes (other versions) are no longer needed
for d in "$CACHE"/prefix-*; do [ "$d" = "$PREFIX" ] || rm -rf "$d"; done
step "done"
