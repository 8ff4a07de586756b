# share/web/web.mk — the web page's files, embedded gzipped in termd: xterm.js and its fit addon from
# npm (pinned by version and integrity, fetched at build time, cached in $(WEB_NPM_CACHE)), the page's
# own files from share/web/, all turned into one C include by tools/webembed. Included by the Makefile.

XTERM_VERSION       := 6.0.0
XTERM_INTEGRITY     := sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==
XTERM_FIT_VERSION   := 0.11.0
XTERM_FIT_INTEGRITY := sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g==
# one cache for every build directory (build, build-asan, build-vg): the tarballs are verified on use
WEB_NPM_CACHE ?= build/npm-cache
WEB_XTERM_TGZ := $(WEB_NPM_CACHE)/xterm-$(XTERM_VERSION).tgz
WEB_FIT_TGZ   := $(WEB_NPM_CACHE)/addon-fit-$(XTERM_FIT_VERSION).tgz

WEB_HTML   := $(sort $(wildcard share/web/*.html))
WEB_OWN    := $(sort $(wildcard share/web/*.js share/web/*.css))
WEB_THIRD  := $(BUILD)/web/xterm.js $(BUILD)/web/xterm.css $(BUILD)/web/addon-fit.js $(BUILD)/web/LICENSES.txt
WEB_INC    := $(BUILD)/gen/web_assets.inc
WEBEMBED   := $(BUILD)/tools/webembed

DEB_PKGS += curl openssl chromium

.PHONY: web-assets
web-assets: $(WEB_INC)

$(WEB_XTERM_TGZ):
	sh share/web/npm-fetch.sh @xterm/xterm $(XTERM_VERSION) $(XTERM_INTEGRITY) $@
$(WEB_FIT_TGZ):
	sh share/web/npm-fetch.sh @xterm/addon-fit $(XTERM_FIT_VERSION) $(XTERM_FIT_INTEGRITY) $@

# out of a tarball, re-checked against its pin first (a cache file changed since is fetched again);
# the source-map comment is dropped (the maps are not served)
define web_extract
	@mkdir -p $(dir $@)
	sh share/web/npm-fetch.sh $(1) $(2) $(3) $<
	tar -xzOf $< package/$(4) | sed '/^\/\/# sourceMappingURL=/d' > $@.tmp && mv $@.tmp $@
endef
$(BUILD)/web/xterm.js: $(WEB_XTERM_TGZ)
	$(call web_extract,@xterm/xterm,$(XTERM_VERSION),$(XTERM_INTEGRITY),lib/xterm.js)
$(BUILD)/web/xterm.css: $(WEB_XTERM_TGZ)
	$(call web_extract,@xterm/xterm,$(XTERM_VERSION),$(XTERM_INTEGRITY),css/xterm.css)
$(BUILD)/web/addon-fit.js: $(WEB_FIT_TGZ)
	$(call web_extract,@xterm/addon-fit,$(XTERM_FIT_VERSION),$(XTERM_FIT_INTEGRITY),lib/addon-fit.js)
$(BUILD)/web/LICENSES.txt: $(WEB_XTERM_TGZ) $(WEB_FIT_TGZ)
	@mkdir -p $(dir $@)
	{ echo "@xterm/xterm $(XTERM_VERSION) (npm):"; tar -xzOf $(WEB_XTERM_TGZ) package/LICENSE; echo; \
	  echo "@xterm/addon-fit $(XTERM_FIT_VERSION) (npm):"; tar -xzOf $(WEB_FIT_TGZ) package/LICENSE; } > $@

# the generator runs on the build machine (also for the musl bundle)
$(WEBEMBED): tools/webembed.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -Wall -Wextra -Werror -o $@ $< $(ZLIB_LIBS)

# pages by their file name (web.c picks one per route), everything else under assets/
$(WEB_INC): $(WEBEMBED) $(WEB_HTML) $(WEB_OWN) $(WEB_THIRD) share/web/web.mk
	@mkdir -p $(dir $@)
	$(WEBEMBED) $@ $(foreach f,$(WEB_HTML),$(notdir $(f))=$(f)) \
	  $(foreach f,$(WEB_OWN) $(WEB_THIRD),assets/$(notdir $(f))=$(f))

$(BUILD)/obj/termd/door/web.o: $(WEB_INC)
