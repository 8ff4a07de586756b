# plugins/agentskills/plugin.mk — copies the agentskills plugin (plugin.json, setup.sh, the Python module)
# to $(BUILD)/plugins/agentskills/ and runs its tests (test-plugin-agentskills). Included by the top Makefile.

SKILLS_DIR := $(BUILD)/plugins/agentskills
SKILLS_SRC := $(wildcard plugins/agentskills/python/agentskills/*.py)
SKILLS_OUT := $(SKILLS_SRC:plugins/agentskills/%=$(SKILLS_DIR)/%)

# the document readers (python3-pptx is not in Debian 12: parse_pptx has its own zip/XML reader)
DEB_PKGS += python3-pypdf python3-docx python3-pylatexenc

.PHONY: plugin-agentskills test-plugin-agentskills
all: plugin-agentskills
plugin-agentskills: $(SKILLS_DIR)/plugin.json $(SKILLS_DIR)/setup.sh $(SKILLS_OUT)

$(SKILLS_DIR)/%: plugins/agentskills/%
	@mkdir -p $(dir $@)
	cp $< $@

$(SKILLS_DIR)/setup.sh: plugins/agentskills/setup.sh
	@mkdir -p $(dir $@)
	cp $< $@
	chmod 755 $@

test-plugin-agentskills: plugin-agentskills plugin-jupyter
	TERMD_PLUGIN_DIR=$(abspath $(BUILD)/plugins) \
	  $(PY) -m pytest -q -p no:cacheprovider tests/plugins/test_agentskills.py
