#!/bin/sh
# share/bundle/stage.sh — lays out the bundle folder and packs it: bin/termd (the multi-call binary)
# with termctl, od-attach, termd-healthz and swerex-remote as symlinks, plugins/<name>/, share/terminfo (common terminals, from the
# host), share/ssl/ca-certificates.crt, share/runtime (the image builder), BUNDLE-INFO; then dist/<name>.tar.xz.
# Usage: stage.sh STAGE_DIR NAME BINARY PLUGIN_BIN_DIR LIB_VERSIONS_FILE OUT_TAR
set -eu
STAGE=$1 NAME=$2 BIN=$3 PLUGBIN=$4 LIBVERS=$5 OUT=$6
die() { echo "stage: $*" >&2; exit 1; }

D=$STAGE/$NAME
rm -rf "$STAGE"
mkdir -p "$D/bin" "$D/plugins" "$D/share/terminfo" "$D/share/ssl"
cp "$BIN" "$D/bin/termd"
chmod 755 "$D/bin/termd"
ln -s termd "$D/bin/termctl"
ln -s termd "$D/bin/od-attach"
ln -s termd "$D/bin/termd-healthz"
ln -s termd "$D/bin/swerex-remote"   # SWE-ReX's server name: termd serves its API

# plugins: each folder's manifest, setup script, Python module and its program when built for musl
missing=""
for p in plugins/*/; do
	p=${p%/}; n=${p#plugins/}
	[ -f "$p/plugin.json" ] || continue
	mkdir -p "$D/plugins/$n"
	cp "$p/plugin.json" "$D/plugins/$n/"
	if [ -f "$p/setup.sh" ]; then cp "$p/setup.sh" "$D/plugins/$n/" && chmod 755 "$D/plugins/$n/setup.sh"; fi
	[ -d "$p/python" ] && cp -R "$p/python" "$D/plugins/$n/"
	prog=$(sed -n 's/.*"run"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' "$p/plugin.json" | head -1)
	if [ -n "$prog" ]; then
		if [ -f "$PLUGBIN/$prog" ]; then
			cp "$PLUGBIN/$prog" "$D/plugins/$n/$prog" && chmod 755 "$D/plugins/$n/$prog"
		else
			missing="$missing $n/$prog"
		fi
	fi
done
find "$D/plugins" -name __pycache__ -prune -exec rm -rf {} +

# terminfo for the common terminals, for images that have none (ncurses in the binary also has
# xterm, xterm-256color, screen, screen-256color, tmux, tmux-256color, linux, vt100, vt220 built in)
for t in xterm xterm-256color xterm-color xterm-16color xterm-direct xterm-vt220 screen screen-256color \
	screen.xterm-256color tmux tmux-256color linux vt100 vt102 vt220 ansi dumb cygwin rxvt rxvt-unicode \
	rxvt-unicode-256color rxvt-256color putty putty-256color konsole konsole-256color gnome gnome-256color \
	alacritty xterm-kitty kitty foot st st-256color vte vte-256color wezterm; do
	for dir in /etc/terminfo /lib/terminfo /usr/share/terminfo; do
		f=$(ls "$dir"/*/"$t" 2>/dev/null | head -1 || true)
		if [ -n "$f" ]; then
			sub=$(basename "$(dirname "$f")")
			mkdir -p "$D/share/terminfo/$sub"
			cp -L "$f" "$D/share/terminfo/$sub/$t"
			break
		fi
	done
done
[ -f "$D/share/terminfo/x/xterm-256color" ] || die "no terminfo for xterm-256color on this machine (ncurses-base)"

# the image builder, to run from the bundle
mkdir -p "$D/share/runtime"
cp share/runtime/od-runtime-build share/runtime/od-runtime-start share/runtime/openhands-shim "$D/share/runtime/"
chmod 755 "$D/share/runtime/od-runtime-build" "$D/share/runtime/od-runtime-start" "$D/share/runtime/openhands-shim"

# CA certificates for images that have none (the clients look in the image first)
CA=/etc/ssl/certs/ca-certificates.crt
[ -s "$CA" ] || die "$CA is missing (apt-get install ca-certificates; make deps)"
cp "$CA" "$D/share/ssl/ca-certificates.crt"

{
	echo "termd bundle $NAME"
	echo "built $(date -u +%Y-%m-%d) on $(. /etc/os-release && echo "$PRETTY_NAME"), musl $(dpkg-query -W -f='${Version}' musl-dev 2>/dev/null || echo '?')"
	echo "static musl libraries (Debian source packages):"
	sed 's/^/  /' "$LIBVERS"
	[ -z "$missing" ] || echo "plugin programs not in this bundle:$missing (libzmq is C++, no static musl build)"
} > "$D/BUNDLE-INFO"

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT.tmp"
tar -C "$STAGE" --owner=0 --group=0 --numeric-owner --sort=name -cf - "$NAME" | xz -9 -T1 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
size=$(wc -c < "$OUT")
unpacked=$(du -sb "$D" | cut -f1)
echo "bundle: $OUT: $size bytes ($unpacked unpacked)"
[ -z "$missing" ] || echo "bundle: not included (no static musl build):$missing"
