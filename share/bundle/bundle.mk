# share/bundle/bundle.mk — `make bundle`: dist/termd-<version>-linux-x86_64.tar.xz, one static musl
# multi-call binary (termd, termctl, od-attach) with the plugins, terminfo and CA certificates;
# `make test-bundle`: the bundle in busybox and Debian minbase chroots, and od-runtime-build with
# buildah. Included by the top Makefile. The musl libraries are cached in $(BUNDLE_CACHE).

BUNDLE_VERSION := $(shell sed -n 's/^\#define TERMD_VERSION *"\(.*\)"/\1/p' proto/proto.h)
BUNDLE_NAME    := termd-$(BUNDLE_VERSION)-linux-x86_64
BUNDLE_TAR     := dist/$(BUNDLE_NAME).tar.xz
BUNDLE_CACHE   ?= $(BUILD)/bundle-cache
BUNDLE_B       := $(BUILD)/bundle
BUNDLE_MUSL    := $(BUNDLE_CACHE)/musl
BUNDLE_STAMP   := $(BUNDLE_MUSL)/.done
# make -j for the OpenSSL and ncurses builds (cold build only)
BUNDLE_JOBS    ?= 1

DEB_PKGS += musl-tools cmake ninja-build xz-utils ca-certificates ncurses-term \
            busybox-static mmdebstrap buildah

BUNDLE_CC     := musl-gcc -isystem $(BUNDLE_CACHE)/kheaders
BUNDLE_OPT    := -Os
BUNDLE_CFLAGS := -ffunction-sections -fdata-sections -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE \
                 -Iproto $(TERMD_INC) -I$(BUILD)/gen -I$(BUNDLE_MUSL)/include -I$(BUNDLE_MUSL)/include/cjson \
                 -I$(BUNDLE_MUSL)/include/ncursesw -DNCURSES_WIDECHAR=1
BUNDLE_LDFLAGS := -static -Wl,--gc-sections -s
BUNDLE_LIBS   := -L$(BUNDLE_MUSL)/lib -lwebsockets -lnghttp2 -lvterm -lcjson -lncursesw -lssl -lcrypto -lz -lm

BUNDLE_SRC := $(TERMD_SRC) $(PROTO_SRC) $(wildcard viewer/termctl*.c viewer/attach*.c) share/bundle/multicall.c
BUNDLE_OBJ := $(BUNDLE_SRC:%.c=$(BUNDLE_B)/obj/%.o)
BUNDLE_BIN := $(BUNDLE_B)/termd
BROWSER_MUSL_OBJ := $(patsubst %.c,$(BUNDLE_B)/obj/%.o,$(wildcard plugins/browser/*.c))
BUNDLE_PLUGBIN := $(BUNDLE_B)/plugin-bin

.PHONY: bundle bundle-tar test-bundle
# the libraries first (a few checks when cached), then a make that plans with them in place
bundle:
	@command -v musl-gcc >/dev/null || { echo "make bundle: musl-gcc is not installed (make deps)"; exit 1; }
	BUNDLE_JOBS=$(BUNDLE_JOBS) sh share/bundle/build-deps.sh $(BUNDLE_CACHE)
	@$(MAKE) --no-print-directory bundle-tar

bundle-tar: $(BUNDLE_TAR)

# each program's main() gets its own name; multicall.c's main() picks one by argv[0]
$(BUNDLE_B)/obj/termd/main.o: BUNDLE_MAIN := -Dmain=termd_main
$(BUNDLE_B)/obj/viewer/termctl.o: BUNDLE_MAIN := -Dmain=termctl_main
$(BUNDLE_B)/obj/viewer/attach.o: BUNDLE_MAIN := -Dmain=odattach_main
$(BUNDLE_B)/obj/termd/core/shellint.o: $(BUILD)/gen/termd.bash.inc $(BUILD)/gen/termd.sh.inc
$(BUNDLE_B)/obj/termd/door/web.o: $(WEB_INC)
$(BUNDLE_B)/obj/plugins/browser/observe.o: $(BUILD)/plugins/browser/gen/page_js.inc

$(BUNDLE_B)/obj/%.o: %.c $(BUNDLE_STAMP)
	@mkdir -p $(dir $@)
	@echo "  MUSL-CC $<"
	@$(BUNDLE_CC) $(BUNDLE_OPT) $(BUNDLE_CFLAGS) $(BUNDLE_MAIN) -I$(BUILD)/plugins/browser/gen -MMD -MP -c $< -o $@

$(BUNDLE_STAMP):
	@echo "the musl libraries are not built: run make bundle"; exit 1

$(BUNDLE_BIN): $(BUNDLE_OBJ)
	$(BUNDLE_CC) $(BUNDLE_LDFLAGS) -o $@ $^ $(BUNDLE_LIBS)

$(BUNDLE_PLUGBIN)/termd-browser: $(BROWSER_MUSL_OBJ)
	@mkdir -p $(dir $@)
	$(BUNDLE_CC) $(BUNDLE_LDFLAGS) -o $@ $^ -L$(BUNDLE_MUSL)/lib -lcjson -lpthread -lm

$(BUNDLE_TAR): $(BUNDLE_BIN) $(BUNDLE_PLUGBIN)/termd-browser share/bundle/stage.sh share/runtime/od-runtime-build \
		share/runtime/od-runtime-start share/runtime/openhands-shim $(BUNDLE_STAMP) \
		$(wildcard plugins/*/plugin.json plugins/*/setup.sh plugins/*/python/*/*.py)
	sh share/bundle/stage.sh $(BUNDLE_B)/stage $(BUNDLE_NAME) $(BUNDLE_BIN) $(BUNDLE_PLUGBIN) \
	  $(BUNDLE_MUSL)/VERSIONS $@

-include $(wildcard $(BUNDLE_OBJ:%.o=%.d) $(BROWSER_MUSL_OBJ:%.o=%.d))

# the bundle in chroots (busybox, Debian minbase) and the image builder with buildah; root only
test-bundle: bundle
	BUNDLE_TAR=$(abspath $(BUNDLE_TAR)) BUNDLE_WORK=$(abspath $(BUNDLE_B))/test \
	  BUNDLE_ROOTS=$(abspath $(BUNDLE_CACHE))/roots \
	  $(PY) -m pytest -q -p no:cacheprovider tests/bundle
