# tests/fuzz/fuzz.mk — libFuzzer targets (clang, ASan + UBSan), built into
# build-fuzz/ from their own clang objects of termd (never mixed with gcc's).
#   make fuzz          each target for FUZZ_TIME seconds (default 60)
#   make fuzz-short    part of make test, the same verdict on every machine:
#                      replays every checked-in seed and crash input, then
#                      FUZZ_SHORT_RUNS inputs from a fixed seed, starting from
#                      a fresh copy of the seeds (build-fuzz/short/<target>/,
#                      emptied each time: what an earlier `make fuzz` found
#                      never changes what it explores)
# make fuzz copies the checked-in seeds (tests/fuzz/corpus/<target>/) to
# build-fuzz/corpus/<target>/, the working corpus the fuzzer grows.
# Crashes land in build-fuzz/artifacts/.

FUZZ_CC         ?= clang
FUZZ_BUILD      := build-fuzz
FUZZ_TIME       ?= 60
FUZZ_SHORT_TIME ?= 300
FUZZ_TARGETS    := action tty shellint render vtparse wire
FUZZ_SAN        := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS     := -O1 -g $(FUZZ_SAN) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE \
                   -Iproto $(TERMD_INC) -Itermd/door/envd -Itests/fuzz -I$(FUZZ_BUILD)/gen
FUZZ_LIBS       := $(shell pkg-config --libs vterm libcjson 2>/dev/null) -lm
# the termd files the targets use; fake.c stands in for the rest
FUZZ_TERMD      := termd/action/actions.c termd/action/actstats.c termd/action/events.c termd/net/tty.c termd/loop/wsconn.c termd/core/screen.c \
                   proto/vtfilter.c proto/vtparse.c termd/core/shellint.c termd/core/render.c termd/core/renderline.c proto/util.c \
                   proto/proto.c termd/codec/multipart.c termd/codec/envelope.c termd/door/envd/meta.c
FUZZ_OBJ        := $(FUZZ_TERMD:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_BUILD)/obj/tests/fuzz/fake.o
FUZZ_BINS       := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
# longest input per target (shellint: past its 8 KiB OSC hold limit)
FUZZ_MAXLEN_action   := 8192
FUZZ_MAXLEN_tty      := 4096
FUZZ_MAXLEN_shellint := 20000
FUZZ_MAXLEN_render   := 8192
FUZZ_MAXLEN_vtparse  := 4096
FUZZ_MAXLEN_wire     := 8192

.PHONY: fuzz fuzz-short fuzz-build fuzz-clean fuzz-fidelity
.SECONDARY: $(FUZZ_OBJ)
fuzz-build: $(FUZZ_BINS)

$(FUZZ_BUILD)/gen/%.inc: share/shell/%
	@mkdir -p $(dir $@)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< > $@

$(FUZZ_BUILD)/obj/termd/core/shellint.o: $(FUZZ_BUILD)/gen/termd.bash.inc $(FUZZ_BUILD)/gen/termd.sh.inc

# header dependencies as in the Makefile (-MMD -MP; a missing .d rebuilds)
$(FUZZ_BUILD)/obj/%.o: %.c $(FUZZ_BUILD)/obj/%.d
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(PKG_CFLAGS) -MMD -MP -c $< -o $@
	@touch $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_BUILD)/fuzz_%.d $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(PKG_CFLAGS) -MMD -MP -o $@ $< $(FUZZ_OBJ) $(FUZZ_LIBS)
	@touch $@

FUZZ_DEP := $(FUZZ_OBJ:.o=.d) $(FUZZ_BINS:%=%.d)
$(FUZZ_DEP):
include $(wildcard $(FUZZ_DEP))

# $(1) = seconds per target, $(2) = extra libFuzzer flags, $(3) = corpus
# folder under build-fuzz/ (emptied first when $(4) is "fresh")
define fuzz_run
	@set -e; for t in $(FUZZ_TARGETS); do \
	  dir=$(FUZZ_BUILD)/$(3)/$$t; \
	  if [ "$(4)" = fresh ]; then rm -rf $$dir; fi; \
	  mkdir -p $$dir $(FUZZ_BUILD)/artifacts; \
	  cp -n tests/fuzz/corpus/$$t/* $$dir/ 2>/dev/null || true; \
	  log=$(FUZZ_BUILD)/fuzz_$$t.log; \
	  echo "== fuzz_$$t, at most $(1) s $(2) (log: $$log)"; \
	  if ! $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(1) -max_len=$(FUZZ_MAXLEN_$$t) \
	    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 $(2) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
	    $$dir >$$log 2>&1; then \
	    tail -n 60 $$log; echo "fuzz_$$t FAILED: the input is in $(FUZZ_BUILD)/artifacts/"; exit 1; \
	  fi; \
	  grep -E '^Done|stat::number_of_executed_units|stat::peak_rss' $$log; \
	done
endef

fuzz: deps $(FUZZ_BINS)
	$(call fuzz_run,$(FUZZ_TIME),,corpus,keep)
	$(MAKE) fuzz-fidelity

# In make test the run is reproducible: the checked-in inputs, then a fixed
# seed and a fixed number of inputs from a fresh copy of them (the time is
# only a cap far above what the runs take), so CI does not turn red by
# chance; the exploring is `make fuzz`'s job.
FUZZ_SHORT_RUNS ?= 3000
fuzz-short: $(FUZZ_BINS)
	$(call fuzz_run,$(FUZZ_SHORT_TIME),-seed=1 -runs=$(FUZZ_SHORT_RUNS),short,fresh)

# the shell-command generator of tests/regress/fidelity.py against bash -c
# (run item 13): a fresh seed each time (say FIDELITY_SEED=N to replay one)
FIDELITY_N ?= 2000
FIDELITY_SEED ?= $(shell date +%s)
fuzz-fidelity: all
	@echo "fuzz-fidelity: seed $(FIDELITY_SEED), $(FIDELITY_N) commands"
	TERMD_FIDELITY_SEED=$(FIDELITY_SEED) TERMD_FIDELITY_N=$(FIDELITY_N) \
	  TERMD_BIN=$(abspath $(BUILD)/termd) $(PY) -m pytest -q -p no:cacheprovider \
	  tests/regress/action/test_run_fidelity.py -k generated

fuzz-clean:
	rm -rf $(FUZZ_BUILD)
clean: fuzz-clean
