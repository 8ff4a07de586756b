# plugins/browser/plugin.mk — builds the browser plugin (termd-browser: Chromium over the DevTools pipe) into
# $(BUILD)/plugins/browser/ with its plugin.json and setup.sh; test-plugin-browser runs its tests.
BROWSER_OUT := $(BUILD)/plugins/browser
BROWSER_SRC := $(wildcard plugins/browser/*.c)
BROWSER_OBJ := $(BROWSER_SRC:plugins/browser/%.c=$(BROWSER_OUT)/obj/%.o)
DEB_PKGS += chromium

.PHONY: plugin-browser test-plugin-browser bench-plugin-browser
all: plugin-browser
plugin-browser: $(BROWSER_OUT)/termd-browser $(BROWSER_OUT)/plugin.json $(BROWSER_OUT)/setup.sh

# the page script, embedded as a C string literal
$(BROWSER_OUT)/gen/page_js.inc: plugins/browser/page.js
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

$(BROWSER_OUT)/obj/observe.o: $(BROWSER_OUT)/gen/page_js.inc

$(BROWSER_OUT)/obj/%.o: plugins/browser/%.c plugins/browser/browser.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(TD_CFLAGS) -I$(BROWSER_OUT)/gen $(shell pkg-config --cflags libcjson) -c $< -o $@

$(BROWSER_OUT)/termd-browser: $(BROWSER_OBJ)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(shell pkg-config --libs libcjson) -lpthread -lm

$(BROWSER_OUT)/plugin.json: plugins/browser/plugin.json
	@mkdir -p $(dir $@)
	cp $< $@

$(BROWSER_OUT)/setup.sh: plugins/browser/setup.sh
	@mkdir -p $(dir $@)
	cp $< $@ && chmod 755 $@

test-plugin-browser: plugin-browser
	TERMD_BROWSER_BIN=$(abspath $(BROWSER_OUT)/termd-browser) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/plugins/test_browser.py

# through termd's /events next to Chromium's one-shot modes (also part of `make bench`)
bench-plugin-browser: plugin-browser $(BUILD)/termd
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) \
	  TERMD_BROWSER_BIN=$(abspath $(BROWSER_OUT)/termd-browser) $(PY) tests/bench/bench_browser.py
