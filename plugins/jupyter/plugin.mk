# plugins/jupyter/plugin.mk — builds the jupyter plugin folder $(BUILD)/plugins/jupyter/ (termd-jupyter,
# plugin.json, setup.sh) and runs its tests (test-plugin-jupyter). Included by the top Makefile.

JUPYTER_DIR := $(BUILD)/plugins/jupyter
JUPYTER_BIN := $(JUPYTER_DIR)/termd-jupyter

# build: libzmq + cJSON + OpenSSL headers; run/test: a Debian ipykernel (python3-zmq brings libzmq5),
# jupyter_client for the Python side of the benchmark
DEB_PKGS += libzmq3-dev python3-ipykernel python3-jupyter-client

.PHONY: plugin-jupyter test-plugin-jupyter bench-jupyter
all: plugin-jupyter
plugin-jupyter: $(JUPYTER_BIN) $(JUPYTER_DIR)/plugin.json $(JUPYTER_DIR)/setup.sh

# -lzmq alone: pkg-config --cflags libzmq adds krb5/pgm/libxml2 include paths that are not needed
JUPYTER_SRC := $(wildcard plugins/jupyter/*.c)
JUPYTER_OBJ := $(JUPYTER_SRC:plugins/jupyter/%.c=$(JUPYTER_DIR)/obj/%.o)
$(JUPYTER_DIR)/obj/%.o: plugins/jupyter/%.c plugins/jupyter/jupyter.h
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(TD_CFLAGS) $(shell pkg-config --cflags libcjson 2>/dev/null) -c $< -o $@
$(JUPYTER_BIN): $(JUPYTER_OBJ)
	$(CC) $(TD_CFLAGS) -o $@ $^ $(shell pkg-config --libs libcjson 2>/dev/null || echo -lcjson) -lzmq -lcrypto

$(JUPYTER_DIR)/plugin.json: plugins/jupyter/plugin.json
	@mkdir -p $(dir $@)
	cp $< $@

$(JUPYTER_DIR)/setup.sh: plugins/jupyter/setup.sh
	@mkdir -p $(dir $@)
	cp $< $@
	chmod 755 $@

test-plugin-jupyter: plugin-jupyter plugin-agentskills
	TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/plugins/test_jupyter.py

# through termd's /events next to a jupyter_client loop (also part of `make bench`)
bench-jupyter: plugin-jupyter plugin-agentskills $(BUILD)/termd
	TERMD_BIN=$(abspath $(BUILD)/termd) TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) $(PY) tests/bench/bench_jupyter.py
