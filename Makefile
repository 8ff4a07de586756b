# termd — top-level build: deps, all, run, test (unit, regress, asan, fuzz, valgrind), bench, fuzz, clean.
# Feature macros live here only (pkg-config ncursesw already sets some).

CC      ?= cc
# termd/ is one folder per layer (termd/README): each header is found by its name;
# a layer's sub-folders (door/envd/, action/plugin/, ...) include their own
# header by its name too (the including file's folder is searched first)
TERMD_LAYERS := codec loop fs core action net door
TERMD_INC := -Itermd $(addprefix -Itermd/,$(TERMD_LAYERS))
PKGS    := libwebsockets vterm libcjson openssl libnghttp2
CFLAGS  ?= -O2 -g
# always on, whatever CFLAGS says (e.g. the sanitizer build)
TD_CFLAGS = $(CFLAGS) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iproto $(TERMD_INC) -I$(BUILD)/gen
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# zlib: termd's zip reader and writer (OpenHands' file transfer) only
ZLIB_LIBS  := $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)
PY      := /usr/bin/python3
BUILD   ?= build
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

# Debian packages needed to build, test and benchmark.
DEB_PKGS := build-essential pkg-config libvterm-dev libwebsockets-dev libcjson-dev \
            libssl-dev libncurses-dev libcmocka-dev python3 python3-pytest python3-pexpect \
            tmux vim-tiny procps curl clang libclang-rt-14-dev openssl valgrind zlib1g-dev \
            asciinema python3-websockets patch sudo git less python3-prometheus-client man-db groff-base \
            python3-venv python3-setuptools python3-wheel \
            libnghttp2-dev python3-h2 python3-hpack python3-hyperframe gdb

TERMD_SRC := $(wildcard termd/*.c $(addsuffix /*.c,$(addprefix termd/,$(TERMD_LAYERS))) \
               $(addsuffix /*/*.c,$(addprefix termd/,$(TERMD_LAYERS))))
PROTO_SRC := $(wildcard proto/*.c)
TERMD_OBJ := $(TERMD_SRC:%.c=$(BUILD)/obj/%.o)
PROTO_OBJ := $(PROTO_SRC:%.c=$(BUILD)/obj/%.o)
# proto/ is libtd.a, the code termd, termctl and od-attach share; each
# binary takes from it only the objects it uses (termd: proto.o, util.o,
# vtfilter.o and url.o for the token file — no WebSocket client)
LIBTD     := $(BUILD)/libtd.a
# termd's objects minus main.o, linked into unit tests
TERMD_LIB_OBJ := $(filter-out $(BUILD)/obj/termd/main.o,$(TERMD_OBJ))
UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ATTACH_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard viewer/attach*.c))
CTL_OBJ    := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard viewer/termctl*.c))
VIEWER_OBJ := $(CTL_OBJ) $(ATTACH_OBJ)

BINS := $(BUILD)/termd $(BUILD)/termctl $(BUILD)/od-attach
MAN_PAGES := share/man/termd.1 share/man/termctl.1 share/man/od-attach.1
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: soak soak-short soak-asan all deps deps-e2b deps-swerex deps-openhands-v1 deps-openhands-sdk deps-agent-sandbox test-agent-sandbox test-k8s test-e2b test-e2b-latest run test test-suites test-prebuild docs-check unit-bins unit regress test-asan valgrind bench clean check-layers install man-check
all: $(BINS) $(BUILD)/swerex-remote $(BUILD)/man.ok

# termd started as swerex-remote serves SWE-ReX's API (termd(1))
$(BUILD)/swerex-remote: $(BUILD)/termd
	ln -sf termd $@

# the manual pages render with no warning from man (man-db, groff)
man-check: $(BUILD)/man.ok
$(BUILD)/man.ok: $(MAN_PAGES)
	@mkdir -p $(BUILD)
	@command -v man >/dev/null || { echo "man-check: man is not installed (make deps)"; exit 1; }
	@for f in $(MAN_PAGES); do \
	  w=$$(MANWIDTH=80 man --warnings -l $$f 2>&1 >/dev/null); \
	  if [ -n "$$w" ]; then echo "man-check: $$f:"; echo "$$w"; exit 1; fi; \
	done
	@touch $@

# make install [PREFIX=/usr/local] [DESTDIR=]: the programs, the plugins
# (where termd looks: PREFIX/share/termd/plugins), share/ files, the manual
# pages and termctl's bash completion
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/termd/plugins \
	  $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	ln -sf termd $(DESTDIR)$(PREFIX)/bin/swerex-remote
	cd $(BUILD)/plugins && for p in */; do p=$${p%/}; \
	  tar -cf - --exclude=obj --exclude=gen "$$p" | tar -xf - -C $(DESTDIR)$(PREFIX)/share/termd/plugins; \
	done
	cp -R share/examples share/shell share/k8s share/runtime $(DESTDIR)$(PREFIX)/share/termd/
	install -m 644 $(MAN_PAGES) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 share/completion/termctl.bash \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions/termctl

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
	    --no-install-recommends $$missing >/dev/null || exit 1; \
	fi
	@# the clients, each into its own folder, at once (npm and pip wait on the network)
	@$(MAKE) --no-print-directory -j3 -Otarget deps-e2b deps-swerex deps-openhands-v1

# the published e2b SDK, pinned by tests/e2b/package-lock.json, for
# tests/regress/door/envd/test_envd.py (npm is Debian's; node_modules is not in git)
deps-e2b:
	@if ! command -v npm >/dev/null; then \
	  echo "make deps: no npm: the e2b SDK tests in tests/regress/door/envd/test_envd.py will skip (they need Node >= 20 and npm)"; \
	elif [ ! tests/e2b/node_modules/.package-lock.json -nt tests/e2b/package-lock.json ]; then \
	  cd tests/e2b && npm ci --no-audit --no-fund --loglevel=error; \
	fi

# OpenHands V1's published clients for tests/regress/door/ohv1/test_openhands_v1_clients.py:
# the TypeScript client pinned by tests/openhands-v1/package-lock.json (npm
# ci), and the Python SDK (openhands-sdk, pinned; it needs Python >= 3.12,
# which Debian 12's 3.11 is not: a python3.12+ on PATH or pyenv's) in a venv
# under $(BUILD). What could not be installed is said in a .skip file the
# tests read (no npm, no network, no Python >= 3.12).
OPENHANDS_SDK_VERSION := 1.43.1
OH_SDK_VENV := $(BUILD)/openhands-sdk-venv
deps-openhands-v1:
	@rm -f tests/openhands-v1/.skip; \
	if ! command -v npm >/dev/null; then \
	  echo "no npm: the OpenHands TypeScript client is not installed" > tests/openhands-v1/.skip; \
	  echo "make deps: $$(cat tests/openhands-v1/.skip)"; \
	elif [ ! tests/openhands-v1/node_modules/.package-lock.json -nt tests/openhands-v1/package-lock.json ]; then \
	  (cd tests/openhands-v1 && npm ci --no-audit --no-fund --loglevel=error) || \
	  echo "npm ci in tests/openhands-v1 failed (no network?)" > tests/openhands-v1/.skip; \
	fi
	@$(MAKE) --no-print-directory deps-openhands-sdk

deps-openhands-sdk:
	@rm -f $(OH_SDK_VENV).skip; \
	if [ -x $(OH_SDK_VENV)/bin/python ] && $(OH_SDK_VENV)/bin/python -c \
	  "import importlib.metadata as m, sys; sys.exit(m.version('openhands-sdk') != '$(OPENHANDS_SDK_VERSION)')" 2>/dev/null; then \
	  exit 0; fi; \
	mkdir -p $(BUILD); tried=""; \
	for c in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3 python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3; do \
	  p=$$(command -v $$c 2>/dev/null) || continue; \
	  $$p -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || continue; \
	  tried="$$tried $$p"; \
	  rm -rf $(OH_SDK_VENV); \
	  if $$p -m venv $(OH_SDK_VENV) && $(OH_SDK_VENV)/bin/pip install -q --disable-pip-version-check \
	    openhands-sdk==$(OPENHANDS_SDK_VERSION) >$(BUILD)/openhands-sdk-pip.log 2>&1; then tried=ok; break; fi; \
	done; \
	if [ -z "$$tried" ]; then \
	  rm -rf $(OH_SDK_VENV); \
	  echo "no Python >= 3.12 (openhands-sdk needs it; Debian 12 has 3.11): the SDK is not installed" > $(OH_SDK_VENV).skip; \
	elif [ "$$tried" != ok ]; then \
	  rm -rf $(OH_SDK_VENV); \
	  echo "pip install openhands-sdk==$(OPENHANDS_SDK_VERSION) failed with$$tried (no network? see $(BUILD)/openhands-sdk-pip.log)" > $(OH_SDK_VENV).skip; \
	fi; \
	[ ! -f $(OH_SDK_VENV).skip ] || echo "make deps: $$(cat $(OH_SDK_VENV).skip)"

# SWE-ReX's real clients for tests/regress/door/swerex/test_swerex.py and
# tests/bench/bench_swerex.py: swe-rex and mini-swe-agent from PyPI, pinned,
# in a venv under build/ (never the system's Python). Offline the venv is
# not made and those tests skip, saying so.
SWEREX_VENV := $(BUILD)/swerex-venv
SWEREX_PINS := swe-rex==1.4.0 mini-swe-agent==2.4.6
deps-swerex:
	@if [ -x $(SWEREX_VENV)/bin/python ] && [ "$$(cat $(SWEREX_VENV)/.pins 2>/dev/null)" = "$(SWEREX_PINS)" ]; then :; \
	elif rm -rf $(SWEREX_VENV) && /usr/bin/python3 -m venv $(SWEREX_VENV) && \
	  $(SWEREX_VENV)/bin/pip install -q $(SWEREX_PINS); then \
	  echo "$(SWEREX_PINS)" > $(SWEREX_VENV)/.pins; \
	else \
	  rm -rf $(SWEREX_VENV); \
	  echo "make deps-swerex: could not install $(SWEREX_PINS) from PyPI (offline?): the SWE-ReX client tests will skip"; \
	fi

# the envd door against the e2b SDK and the Connect wire (needs make deps)
test-e2b: all deps-e2b
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  OD_ATTACH_BIN=$(abspath $(BUILD)/od-attach) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/regress/door/envd/test_envd.py

# the same SDK tests on the newest published e2b (not in make test: a new
# release must not turn CI red). Installed into a scratch copy of
# tests/e2b (drive.mjs, package.json) in $(BUILD)/e2b-latest: tests/e2b's
# lockfile and node_modules are never touched. TERMD_E2B_DIR points
# tests/regress/door/envd/test_envd.py at it.
test-e2b-latest: all
	@command -v npm >/dev/null || { echo "test-e2b-latest: npm is not installed (make deps)"; exit 1; }
	rm -rf $(BUILD)/e2b-latest && mkdir -p $(BUILD)/e2b-latest
	cp tests/e2b/drive.mjs tests/e2b/package.json $(BUILD)/e2b-latest/
	cd $(BUILD)/e2b-latest && npm install --no-audit --no-fund --loglevel=error --save-exact e2b@latest
	@echo "test-e2b-latest: e2b $$(node -p "require('./$(BUILD)/e2b-latest/node_modules/e2b/package.json').version")"
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  OD_ATTACH_BIN=$(abspath $(BUILD)/od-attach) TERMD_E2B_DIR=$(abspath $(BUILD)/e2b-latest) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/regress/door/envd/test_envd.py

# shell integration scripts, embedded in termd as C string literals
$(BUILD)/gen/%.inc: share/shell/%
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

$(BUILD)/obj/termd/core/shellint.o: $(BUILD)/gen/termd.bash.inc $(BUILD)/gen/termd.sh.inc

# -MMD -MP: each object gets a .d file naming the headers it included, so a
# header change rebuilds exactly the objects that use it. An object whose .d
# is missing (a build directory from before) is rebuilt: the .d files are
# targets with an empty rule. (clang writes the .d after the object: the
# touch keeps the object the newer of the two.)
$(BUILD)/obj/%.o: %.c $(BUILD)/obj/%.d
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@
	@touch $@

$(LIBTD): $(PROTO_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/termd: $(TERMD_OBJ) $(LIBTD)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(PKG_LIBS) $(ZLIB_LIBS) -lutil -lm

$(BUILD)/termctl: $(CTL_OBJ) $(LIBTD)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm

$(ATTACH_OBJ): PKG_CFLAGS += $(shell pkg-config --cflags ncursesw)
$(BUILD)/od-attach: $(ATTACH_OBJ) $(LIBTD)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(shell pkg-config --libs ncursesw vterm libcjson openssl) -lm

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/tests/%.d $(TERMD_LIB_OBJ) $(LIBTD)
	@mkdir -p $(dir $@)
	$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -MMD -MP -o $@ $< $(TERMD_LIB_OBJ) $(LIBTD) $(PKG_LIBS) $(ZLIB_LIBS) -lcmocka -lutil -lm
	@touch $@

# the header dependencies the compiler wrote (none before the first build)
DEP_FILES := $(patsubst %.o,%.d,$(TERMD_OBJ) $(PROTO_OBJ) $(VIEWER_OBJ)) $(UNIT_BIN:%=%.d)
$(DEP_FILES):
include $(wildcard $(DEP_FILES))

# deps first, then a fresh make: PKG_CFLAGS is read when the Makefile is parsed,
# so on a fresh machine the packages must be there before the build is planned.
run: deps
	$(MAKE) all
	@echo "termd: listening on 127.0.0.1:8421 — try: $(BUILD)/termctl run 'echo hello'   (Ctrl-C stops termd)"
	./$(BUILD)/termd --listen 127.0.0.1:8421

# calls and includes go down the layers named in tools/layers (nm on the built objects),
# no circle of calls over four files or across a folder, no function over 200 lines;
# termd/ACTIONS (action name -> file) is what the action tables say; CODE-MAP has a
# row for every tracked file, sorted by path
check-layers: all
	$(PY) tools/check-layers --build $(BUILD)
	$(PY) tools/action-index --check
	$(PY) tools/check-code-map

unit-bins: $(UNIT_BIN)
unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

# REGRESS_ARGS: more pytest arguments (test-asan's --deselect list)
regress: all
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  OD_ATTACH_BIN=$(abspath $(BUILD)/od-attach) \
	  $(PY) -m pytest -q -p no:cacheprovider $(REGRESS_ARGS) tests/regress

# the READMEs' shell blocks run as written against a termd the check starts
docs-check: all
	$(PY) tests/docs/check_docs.py --build $(BUILD)

# The unit tests and tests/regress again, built with AddressSanitizer + UBSan
# into build-asan/, minus ASAN_DESELECT: tests whose value is a program other
# than termd, which `make regress` runs on the plain build anyway:
#  - the e2b SDK under node (test_envd.py's test_sdk_*) and OpenHands V1's
#    TypeScript client and openhands-sdk (test_openhands_v1_clients.py): a
#    gcov build of termd found no line of termd/ they reach that the rest of
#    tests/regress does not (the wire tests of their doors stay);
#  - Chromium drawing underscores (test_web_glyphs.py: xterm.js's pixels);
#  - the agent-sandbox SDK (it skipped here anyway: its venv is the plain
#    build's; its 5 lines of its own, sandbox/exec.c's invalid UTF-8 answer,
#    run in the plain pass);
#  - tools/: test-run, check_docs.py and `make install` (Python and make;
#    docs-check runs on the plain build).
# SWE-ReX's clients (its ported suite, every action, mini-swe-agent) stay:
# they alone reach ~290 lines of door/swerex/ (execute, read/write_file,
# interactive and interrupt answers); so does test_web.py in Chromium: ~70
# lines (the preview's cookie, /tty input, web.c's gzip and 304, the
# cross-site 403) little else reaches. Measured under ASan on the shared
# two-core machine (load ~12): the deselected tests took 121 s of the pass.
ASAN_DESELECT := $(addprefix --deselect tests/regress/, \
  door/envd/test_envd.py::test_sdk_commands \
  door/envd/test_envd.py::test_sdk_create_in_debug_mode_without_token \
  door/envd/test_envd.py::test_sdk_reconnect_loses_nothing \
  door/envd/test_envd.py::test_sdk_pty \
  door/envd/test_envd.py::test_sdk_files \
  door/envd/test_envd.py::test_sdk_watch_dir \
  door/envd/test_envd.py::test_sdk_users_when_root \
  door/envd/test_envd.py::test_sdk_short_programs_end_with_their_own_code \
  door/ohv1/test_openhands_v1_clients.py \
  door/sandbox/test_agent_sandbox_sdk.py \
  door/web/test_web_glyphs.py \
  tools)
test-asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g $(SAN_FLAGS)" REGRESS_ARGS="$(ASAN_DESELECT)" unit regress

# Issue 52's soak (tests/soak/soak.py): one termd for SOAK_MINUTES (default
# 60) under a seeded (SOAK_SEED), modest mixed load through every door, with
# faults on a schedule; not in `make test`. soak-asan: a shorter one against
# a sanitizer build (SOAK_MINUTES default 5).
SOAK_MINUTES ?= 60
soak: all
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  SOAK_MINUTES=$(SOAK_MINUTES) nice -n 5 $(PY) tests/soak/soak.py

soak-short: all
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  SOAK_MINUTES=3 nice -n 5 $(PY) tests/soak/soak.py

soak-asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g $(SAN_FLAGS)" all
	TERMD_BIN=$(abspath build-asan/termd) TERMCTL_BIN=$(abspath build-asan/termctl) SOAK_ASAN=1 \
	  SOAK_MINUTES=$${SOAK_ASAN_MINUTES:-5} nice -n 5 $(PY) tests/soak/soak.py

# A regress subset with termd under valgrind memcheck, built without
# sanitizers into build-vg/: a memcheck error or a definite leak makes
# termd exit 99 at its SIGTERM, which fails the test (conftest.py shows
# valgrind's log). The subset covers run, keys, screen, sessions, the event
# stream, files, tty and faults in about three minutes on two cores.
VG_TESTS := $(addprefix tests/regress/, \
  loop/test_faults.py \
  door/ohv1/test_openhands_v1.py::test_output_pieces_come_while_it_runs_in_order_none_repeated \
  door/ohv1/test_openhands_v1.py::test_socket_resend_and_commands \
  door/ohv1/test_openhands_v1.py::test_upload_and_download \
  door/ohv1/test_openhands_v1.py::test_git_changes_and_diff \
  net/test_listen_api.py::test_api_tags_survive_an_upgrade_in_place \
  core/test_limits.py::test_max_sessions \
  core/test_limits.py::test_scrollback_lines \
  net/test_access.py::test_view_token_cannot_act \
  net/test_tls.py::test_wss_events_and_https_healthz \
  core/test_render.py::test_output_that_broke_libvterm \
  core/test_restart.py \
  core/test_pipe_sessions.py::test_stdin_pipe_write_and_eof \
  core/test_pipe_sessions.py::test_stdout_and_stderr_apart_and_exit_code \
  action/test_run_units.py::test_heredoc \
  core/test_input_wait.py::test_getpass_is_a_password \
  core/test_input_wait.py::test_patch_reversed_question \
  action/test_run_units.py::test_seven_commands_last_false \
  action/test_run_units.py::test_multiline_then_single_line \
  core/test_render.py::test_progress_bar_last_state \
  core/test_render.py::test_erase_line_and_cursor_up \
  core/test_render.py::test_utf8_and_wide_chars \
  core/test_render.py::test_50000_lines_truncated \
  core/test_render.py::test_output_under_the_limit_is_whole \
  core/test_fullscreen.py \
  net/test_tty.py \
  core/test_fair.py::test_viewers_past_the_viewer_rate_get_screens_then_output \
  action/test_run_state.py::test_cd_persists_and_cwd_follows \
  action/test_run_state.py::test_variables_functions_aliases_persist \
  action/test_run_state.py::test_exit_codes \
  action/test_run_state.py::test_extras_fields_and_types \
  action/test_run_state.py::test_output_that_looks_like_integration_marks \
  action/test_run_input.py::test_read_prompt_then_answer \
  action/test_run_input.py::test_ctrl_c_sleep \
  action/test_run_input.py::test_relay_polling_the_tty_is_not_waiting_until_it_asks \
  action/test_run_continuation.py \
  action/test_run_concurrent_input.py::test_second_command_is_busy_input_is_not \
  action/test_run_long.py::test_long_command_keeps_shell_state \
  action/test_run_timeouts.py::test_hard_timeout_then_rest \
  action/test_run_timeouts.py::test_busy_nothing_typed \
  action/test_sessions.py::test_run_in_unknown_session_opens_a_shell \
  action/test_sessions.py::test_open_program_with_cwd_and_env \
  action/test_sessions.py::test_close_ends_children_of_children \
  action/test_sessions.py::test_close_answers_actions_waiting_on_the_session \
  action/test_sessions.py::test_program_session_exit \
  action/test_sessions.py::test_program_killed_by_signal \
  action/test_sessions.py::test_expect_text_that_appears_later \
  action/test_sessions.py::test_expect_timeout \
  action/test_sessions.py::test_expect_while_a_run_is_in_flight \
  action/test_events_stream.py::test_subscriber_sees_command_start_end_then_run \
  action/test_events_stream.py::test_command_events_for_keys_typed_command \
  action/test_events_stream.py::test_subscribe_since_replays_exactly_the_later_events \
  action/test_events_stream.py::test_retention_gap \
  action/test_events_stream.py::test_event_log \
  action/test_events_stream.py::test_resent_id_is_not_run_twice \
  action/test_events_stream.py::test_result_survives_disconnect \
  action/test_files.py::test_read_whole_file \
  action/test_files.py::test_read_errors \
  action/test_files.py::test_read_base64 \
  action/test_files.py::test_write_utf8_and_base64 \
  action/test_files.py::test_write_expected_sha256 \
  action/test_files.py::test_write_errors \
  action/test_files.py::test_edit_create \
  action/test_files.py::test_str_replace_success_and_snippet \
  action/test_files.py::test_insert \
  action/test_files.py::test_undo_edit_through_three_edits \
  net/test_health_events.py::test_hello \
  net/test_health_events.py::test_bad_json \
  net/test_health_events.py::test_frame_over_max_frame \
  net/test_health_events.py::test_client_disconnects_mid_command \
  net/test_health_events.py::test_client_disconnects_mid_frame \
  net/test_health_events.py::test_many_connections_come_and_go \
  net/test_health_events.py::test_token_auth \
  action/test_ignored_args.py::test_answers_given_later_carry_them \
  action/test_plugins.py::test_custom_plugin_json_lines \
  action/test_plugins.py::test_setup_failure_message_exact \
  action/test_plugins.py::test_dead_program_restarted_and_said_so \
  action/test_plugins.py::test_plugin_processes_end_with_termd \
  door/web/test_web.py::test_files_gzipped_or_plain_with_headers \
  core/test_cgroups.py::test_double_forked_daemon_killed_by_tree \
  core/test_cgroups.py::test_limits_per_session_override_defaults \
  core/test_cgroups.py::test_metrics)
# the slowest twins of tests kept in the subset
VG_DESELECT := \
  --deselect 'tests/regress/loop/test_faults.py::test_client_gone_while_termd_writes_a_large_answer[tcp-rst]' \
  --deselect tests/regress/loop/test_faults.py::test_output_file_on_a_full_tmpfs

valgrind:
	@command -v valgrind >/dev/null || { echo "make valgrind: valgrind is not installed (make deps)"; exit 1; }
	$(MAKE) BUILD=build-vg CFLAGS="-O1 -g" all
	TERMD_VALGRIND=1 TERMD_BIN=$(abspath build-vg/termd) TERMCTL_BIN=$(abspath build-vg/termctl) \
	  OD_ATTACH_BIN=$(abspath build-vg/od-attach) \
	  $(PY) -m pytest -q -p no:cacheprovider $(VG_DESELECT) $(VG_TESTS)

# each plugin's own tests (plugins/<name>/plugin.mk defines test-plugin-<name>)
PLUGIN_TESTS := $(patsubst plugins/%/plugin.mk,test-plugin-%,$(wildcard plugins/*/plugin.mk))
.PHONY: test-plugins test-python
test-plugins: $(PLUGIN_TESTS)

# the Python client library (proto/python): unit tests on a fake server, then
# integration tests against this build's termd
test-python: all
	cd proto/python && TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) -m pytest -q -p no:cacheprovider tests

# agent-sandbox's Python SDK, pinned (tests/agent-sandbox/requirements.txt), in
# a venv under the build folder (never the system's Python): make test runs
# it before the regress suite; offline, the reason is kept in the venv and
# tests/regress/door/sandbox/test_agent_sandbox_sdk.py skips with it
AS_VENV := $(BUILD)/agent-sandbox-venv
deps-agent-sandbox:
	@if [ -f $(AS_VENV)/.ok ] && [ $(AS_VENV)/.ok -nt tests/agent-sandbox/requirements.txt ]; then exit 0; fi; \
	rm -rf $(AS_VENV) && $(PY) -m venv $(AS_VENV) || exit 1; \
	if $(AS_VENV)/bin/pip install -q --disable-pip-version-check --no-input --retries 2 --timeout 30 \
	     -r tests/agent-sandbox/requirements.txt 2>$(AS_VENV)/pip.err; then \
	  touch $(AS_VENV)/.ok; \
	else \
	  tail -n 3 $(AS_VENV)/pip.err > $(AS_VENV)/offline; \
	  echo "deps-agent-sandbox: could not install k8s-agent-sandbox (offline?): door/sandbox/test_agent_sandbox_sdk.py will skip"; \
	fi

# the agent-sandbox door against agent-sandbox's Python SDK (direct mode)
test-agent-sandbox: all deps-agent-sandbox
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMCTL_BIN=$(abspath $(BUILD)/termctl) \
	  OD_ATTACH_BIN=$(abspath $(BUILD)/od-attach) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/regress/door/sandbox/test_agent_sandbox.py tests/regress/door/sandbox/test_agent_sandbox_sdk.py

# share/k8s against a real API server (not in make test: it builds kube-apiserver,
# kubectl, etcd and agent-sandbox's controller from their Go modules, pinned by
# tests/k8s/tools/go.mod, under $(BUILD)/k8s with nice 19 and one job; minutes
# to build the first time). tests/k8s/run.py: CRDs, dry-run=server, the
# template's Pods from the controller (Pending: no kubelet)
test-k8s:
	@command -v go >/dev/null || { echo "test-k8s: go is not installed"; exit 1; }
	mkdir -p $(BUILD)/k8s
	tests/k8s/build-tools.sh $(BUILD)/k8s
	$(PY) tools/test-run $(PY) tests/k8s/run.py $(BUILD)/k8s

# make test: the suites under tools/test-run, which fails the run if any
# process it started is still running at its end (and names and kills it)
test: deps
	$(PY) tools/test-run $(MAKE) test-suites

# The builds the later phases use (the ASan and valgrind builds, the fuzz
# targets, the bundle with its static musl libraries: ~5 min of CPU in a
# fresh clone, most of it one core) are made in the background at nice 19
# while the plain suites run (regress, docs-check, plugins, python: ~16 min,
# much of it waiting on termd, the shells and the clients): at nice 19 they
# take only CPU those leave idle, so the suites run as without them. The
# later phases find them made by the same rules and flags (nothing is built
# twice) and still run one at a time, no test suite beside another. A failed
# background build fails the run, its log shown; a failed suite waits for
# the builds before it ends the run (test-run: no process left behind).
TEST_PREBUILD_LOG := $(BUILD)/test-prebuild.log
test-prebuild:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g $(SAN_FLAGS)" all unit-bins
	$(MAKE) BUILD=build-vg CFLAGS="-O1 -g" all
	$(MAKE) fuzz-build
	$(MAKE) BUNDLE_JOBS=2 bundle

test-suites:
	$(MAKE) -j2 -Otarget deps-agent-sandbox all
	@echo "test-prebuild: the later phases' builds, in the background at nice 19 (log: $(TEST_PREBUILD_LOG))"
	nice -n 19 $(MAKE) -j2 --no-print-directory test-prebuild >$(TEST_PREBUILD_LOG) 2>&1 & pb=$$!; \
	rc=0; { $(MAKE) check-layers unit regress docs-check && $(MAKE) test-plugins && $(MAKE) test-python; } || rc=$$?; \
	if ! wait $$pb; then tail -n 60 $(TEST_PREBUILD_LOG); echo "test-prebuild FAILED (log: $(TEST_PREBUILD_LOG))"; exit 1; fi; \
	echo "test-prebuild: done"; exit $$rc
	$(MAKE) fuzz-short
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(MAKE) test-asan
	$(MAKE) valgrind
	$(MAKE) test-bundle
	$(MAKE) soak-short

bench: deps
	$(MAKE) all $(BUILD)/bench-rtt $(BUILD)/bench-viewers $(BUILD)/bench-relay
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_RTT_BIN=$(abspath $(BUILD)/bench-rtt) $(PY) tests/bench/bench.py
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_VIEWERS_BIN=$(abspath $(BUILD)/bench-viewers) $(PY) tests/bench/bench_tty.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_openhands.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_openhands_v1.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_envd.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_e2b.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_front.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_pipes.py
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMD_SWEREX_VENV=$(abspath $(SWEREX_VENV)) $(PY) tests/bench/bench_swerex.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_filework.py
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_RELAY_BIN=$(abspath $(BUILD)/bench-relay) $(PY) tests/bench/bench_ports.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_upgrade.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_cgroups.py
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_RTT_BIN=$(abspath $(BUILD)/bench-rtt) $(PY) tests/bench/bench_python.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_link.py
	TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) tests/bench/bench_fidelity.py
	TERMD_BIN=$(abspath $(BUILD)/termd) BENCH_RTT_BIN=$(abspath $(BUILD)/bench-rtt) $(PY) tests/bench/bench_input_wait.py
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) $(PY) tests/bench/bench_jupyter.py
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) $(PY) tests/bench/bench_browser.py

# the C round-trip client the bench drives
$(BUILD)/bench-rtt: tests/bench/rtt.c $(LIBTD)
	$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm

# the ideal splice relay bench_ports.py times the preview proxy against
$(BUILD)/bench-relay: tests/bench/relay.c
	$(CC) $(TD_CFLAGS) -o $@ $^

# the C /tty viewers the fan-out figure drives (tests/bench/bench_tty.py)
$(BUILD)/bench-viewers: tests/bench/viewers.c $(LIBTD)
	$(CC) $(TD_CFLAGS) $(PKG_CFLAGS) -o $@ $^ $(PKG_LIBS) -lm

clean:
	rm -rf build build-asan build-vg

# libFuzzer targets: make fuzz, make fuzz-short (tests/fuzz/)
include tests/fuzz/fuzz.mk
# each plugin's own build and tests (plugins/<name>/plugin.mk)
-include $(wildcard plugins/*/plugin.mk)
# the web page's files embedded in termd: xterm.js from npm, share/web/ (share/web/web.mk)
include share/web/web.mk
# make bundle (static musl bundle), make test-bundle (share/bundle/bundle.mk)
include share/bundle/bundle.mk

# Plant each mutant of tests/mutants/mutants.py in a scratch copy of the
# checkout, one at a time, and run the tests that must catch it (slow:
# not in `make test`; run it when a change touches the files it names).
# MUTANTS_ARGS="-k NAME" for some of them.
.PHONY: mutants
mutants:
	$(PY) tests/mutants/run.py $(MUTANTS_ARGS)
