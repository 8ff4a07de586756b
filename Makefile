# termd — top-level build: deps, all, run, test, bench, fuzz, clean.
# Feature macros live here only (pkg-config ncursesw already sets some).

CC      ?= cc
PKGS    := libwebsockets vterm libcjson openssl
CFLAGS  ?= -O2 -g
# always on, whatever CFLAGS says (e.g. the sanitizer build)
TD_CFLAGS = $(CFLAGS) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iproto -Itermd -I$(BUILD)/gen
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
PY      := /usr/bin/python3
BUILD   ?= build
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# Debian packages needed to build, test and benchmark.
DEB_PKGS := build-essential pkg-config libvterm-dev libwebsockets-dev libcjson-dev \
            libssl-dev libncurses-dev libcmocka-dev python3 python3-pytest python3-pexpect \
            tmux vim-tiny procps curl clang libclang-rt-14-dev openssl

TERMD_SRC := $(wildcard termd/*.c)
PROTO_SRC := $(wildcard proto/*.c)
TERMD_OBJ := $(TERMD_SRC:%.c=$(BUILD)/obj/%.o)
PROTO_OBJ := $(PROTO_SRC:%.c=$(BUILD)/obj/%.o)
# termd's objects minus main.o, linked into unit tests
TERMD_LIB_OBJ := $(filter-out $(BUILD)/obj/termd/main.o,$(TERMD_OBJ))
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

BINS := $(BUILD)/termd $(BUILD)/termctl $(BUILD)/od-attach

.PHONY: all deps run test unit regress test-asan bench clean
all: $(BINS)

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

# shell integration scripts, embedded in termd as C string literals
$(BUILD)/gen/%.inc: share/shell/%
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

$(BUILD)/obj/termd/shellint.o: $(BUILD)/gen/termd.bash.inc $(BUILD)/gen/termd.sh.inc

$(BUILD)/obj/%.o: %.c $(wildcard termd/*.h proto/*.h)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/termd: $(TERMD_OBJ) $(PROTO_OBJ)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(PKG_LIBS) -lutil -lm

$(BUILD)/termctl: $(BUILD)/obj/viewer/termctl.o $(PROTO_OBJ)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm

$(BUILD)/obj/viewer/od-attach.o: PKG_CFLAGS += $(shell pkg-config --cflags ncursesw)
$(BUILD)/od-attach: $(BUILD)/obj/viewer/od-attach.o $(BUILD)/obj/termd/vtcompat.o $(BUILD)/obj/termd/util.o $(PROTO_OBJ)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(shell pkg-config --libs ncursesw vterm libcjson openssl) -lm

$(BUILD)/tests/%: tests/unit/%.c $(TERMD_LIB_OBJ) $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(PKG_LIBS) -lcmocka -lutil -lm

run: deps all
	@echo "termd: listening on 127.0.0.1:8421 — try: $(BUILD)/termctl run 'echo hello'   (Ctrl-C stops termd)"
	./$(BUILD)/termd --listen 127.0.0.1:8421

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

regress: all
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  OD_ATTACH_BIN=$(abspath $(BUILD)/od-attach) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/regress

# The whole suite again, built with AddressSanitizer + UBSan into build-asan/.
test-asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g $(SAN_FLAGS)" unit regress

test: deps
	$(MAKE) all unit regress
	$(MAKE) fuzz-short
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(MAKE) test-asan

bench: deps all $(BUILD)/bench-rtt
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_RTT_BIN=$(abspath $(BUILD)/bench-rtt) $(PY) tests/bench/bench.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_tty.py

# the C round-trip client the bench drives
$(BUILD)/bench-rtt: tests/bench/rtt.c $(PROTO_OBJ)
	$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm

clean:
	rm -rf build build-asan

# libFuzzer targets: make fuzz, make fuzz-short (tests/fuzz/)
include tests/fuzz/fuzz.mk
