# SPDX-License-Identifier: MIT
# kvd: daemon, client library, tools, tests, man pages.
#   make          build everything (installs nothing)
#   make deps     install the missing Debian packages (scripts/install-deps.sh)
#   make test     deps, then unit + integration tests, man page lint, clang check
#   make demo     deps, then kvd on the host backend + kvbench with 4 engines
#   make demo-vllm  two vLLM engine processes sharing a prompt through kvd
#   make bench-vllm kvd.vllm against vLLM's CPU offloading, one run
#   make bench    deps, then benchmarks on private kvds and one summary table
#   make soak     60 s of 8 clients killed and restarted at random (SOAK_SECONDS)
#   make tsan     the ring stress test under ThreadSanitizer (build-tsan/)
#   make valgrind integration tests with kvd and clients under valgrind
#   make gpu-bundle  the GPU check and what it runs, for a host without the packages
#   make install  PREFIX=/usr/local DESTDIR=; make uninstall the same

VERSION		:= $(shell cat VERSION)
VERSION_MAJOR	:= $(word 1,$(subst ., ,$(VERSION)))
SONAME		:= libkvclient.so.$(VERSION_MAJOR)
KERNELS_SONAME	:= libkvkernels.so.$(VERSION_MAJOR)

CC		?= gcc
CFLAGS		?= -O2 -g
WARN		:= -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BASE_CFLAGS	:= -std=gnu11 -D_GNU_SOURCE -Iinclude -DKV_VERSION=\"$(VERSION)\" $(WARN)
# Every compile writes its header dependencies beside the object (.d).
DEPFLAGS	:= -MMD -MP
O		?= build
PREFIX		?= /usr/local

# CUDA: nvcc on PATH, else $(CUDA_HOME)/bin/nvcc; built without it if absent.
CUDA_HOME	?= /usr/local/cuda
NVCC		?= $(shell command -v nvcc 2>/dev/null || { [ -x $(CUDA_HOME)/bin/nvcc ] && echo $(CUDA_HOME)/bin/nvcc; })

# The cuda backend and the library's CUDA import compile against the
# toolkit's cuda.h (types only: the driver is dlopen'ed at run time).
HAVE_CUDA_H	:= $(wildcard $(CUDA_HOME)/include/cuda.h)
ifneq ($(HAVE_CUDA_H),)
BASE_CFLAGS	+= -DKV_HAVE_CUDA -isystem $(CUDA_HOME)/include
endif

KVD_SRCS	:= $(wildcard kvd/*.c)
LIB_SRCS	:= $(wildcard libkvclient/*.c)
KERNEL_SRCS	:= $(wildcard kernels/*.c)
KERNEL_CU	:= $(wildcard kernels/*.cu)
UNIT_SRCS	:= $(filter-out tests/unit/test_lib_%,$(wildcard tests/unit/test_*.c))
LIBUNIT_SRCS	:= $(wildcard tests/unit/test_lib_*.c)
INTEG_SRCS	:= $(filter-out tests/integration/harness.c,$(wildcard tests/integration/*.c))

KVD_OBJS	:= $(KVD_SRCS:%.c=$(O)/obj/%.o) $(O)/obj/libkvclient/cudadrv.o \
		   $(O)/obj/libkvclient/ctx.o $(O)/obj/tools/metrics.o \
		   $(O)/obj/tools/admin.o
LIB_OBJS	:= $(LIB_SRCS:%.c=$(O)/pic/%.o)
# The kernels' C references (kv_ref_*, kv_layout_init, ...): libkvkernels.
KERNELS_OBJS	:= $(KERNEL_SRCS:%.c=$(O)/pic/%.o)
KERNEL_REF_OBJS	:= $(KERNEL_SRCS:%.c=$(O)/obj/%.o)

LIB		:= $(O)/$(SONAME)
KERNELS_LIB	:= $(O)/$(KERNELS_SONAME)
UNIT_BINS	:= $(UNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%) \
		   $(LIBUNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%)
LIB_LIBS	:= -lxxhash -lcrypto -ldl -lm
# kvd's sd_notify (kvd/notify.c).
SYSTEMD_LIBS	:= $(shell pkg-config --libs libsystemd 2>/dev/null || echo -lsystemd)
# kvd's --metrics-listen HTTP server (kvd/metrics_http.c).
MHD_LIBS	:= $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
# KV events (kvd/events.c): libzmq, msgpack-c.
EVENTS_LIBS	:= $(shell pkg-config --libs libzmq msgpack 2>/dev/null || echo -lzmq -lmsgpackc)
INTEG_BINS	:= $(INTEG_SRCS:tests/integration/%.c=$(O)/tests/integration/%)
TOOLS		:= $(O)/kvctl $(O)/kvbench

ifeq ($(V),1)
Q :=
else
Q := @
endif

all: $(O)/kvd $(LIB) $(O)/libkvclient.a $(KERNELS_LIB) $(TOOLS) kernels python

# The Debian packages (scripts/install-deps.sh, apt): never by a plain
# `make`; before any compile when a goal is one of README's set-up
# commands or deps itself (`make deps all`); .ci/run calls the script.
deps:
	$(Q)sh scripts/install-deps.sh

SETUP_GOALS	:= deps demo demo-vllm test check bench bench-vllm gpu-bundle
DEPS_FIRST	:= $(if $(filter $(SETUP_GOALS),$(MAKECMDGOALS)),deps)

$(O)/obj/%.o: %.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ikernels $(CFLAGS) -c -o $@ $<

$(O)/pic/%.o: %.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (pic)"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) $(CFLAGS) -fPIC -c -o $@ $<

$(O)/kvd: $(KVD_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -luring -ljemalloc -lxxhash -ldl $(SYSTEMD_LIBS) \
		$(MHD_LIBS) $(EVENTS_LIBS)

$(LIB): $(LIB_OBJS) libkvclient/libkvclient.map
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script=libkvclient/libkvclient.map -o $@ $(LIB_OBJS) $(LIB_LIBS)
	$(Q)ln -sf $(SONAME) $(O)/libkvclient.so

# The same objects, for a static link (Libs.private of kvclient.pc).
$(O)/libkvclient.a: $(LIB_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# The kernels' C references, their own library: libkvclient does not call
# them and they do not call libkvclient.
$(KERNELS_LIB): $(KERNELS_OBJS) kernels/libkvkernels.map
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,$(KERNELS_SONAME) \
		-Wl,--version-script=kernels/libkvkernels.map -o $@ $(KERNELS_OBJS) -lm
	$(Q)ln -sf $(KERNELS_SONAME) $(O)/libkvkernels.so

# In build/ ($$ORIGIN, tests two levels down), and installed under any
# PREFIX: bin/ and sbin/ beside lib/ ($$ORIGIN/../lib).
LIB_RPATH	:= -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../..' \
		   -Wl,-rpath,'$$ORIGIN/../lib' -Wl,-rpath,$(PREFIX)/lib
LIB_LINK	:= -L$(O) -lkvclient $(LIB_RPATH)
KERNELS_LINK	:= -L$(O) -lkvkernels $(LIB_RPATH)

# kvctl top draws with ncurses (wide-character build; libncurses-dev).
CURSES_LIBS	:= $(shell pkg-config --libs ncursesw 2>/dev/null || echo -lncursesw)

$(O)/kvctl: $(O)/obj/tools/kvctl.o $(O)/obj/tools/emit.o $(O)/obj/tools/admin.o \
		$(O)/obj/tools/metrics.o \
		$(O)/obj/tools/top.o $(O)/obj/tools/kvevents.o $(O)/obj/libkvclient/ctx.o
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CURSES_LIBS) $(EVENTS_LIBS)

# kvbench: tools/kvbench/, one file per mode (mode_*.c) and its helpers.
KVBENCH_OBJS	:= $(patsubst %.c,$(O)/obj/%.o,$(wildcard tools/kvbench/*.c) tools/emit.c \
		   $(wildcard tools/trace*.c) tools/admin.c)

$(O)/kvbench: $(KVBENCH_OBJS) $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(KVBENCH_OBJS) $(LIB_LINK) -lm -ljson-c -lxxhash -lcrypto

# The kvd Python package (python/kvd/): the CPython extension _kvd over
# libkvclient, built against Debian's python3 (python3-dev), and the
# package's .py files beside it in $(O)/python/kvd, so that
# PYTHONPATH=$(O)/python imports it from the tree. Skipped, with a word,
# without Python.h.
PYTHON		?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3)
PY_CFG		= $(shell $(PYTHON) -c 'import sysconfig as s; print(s.get_config_var("$(1)") or "")' 2>/dev/null)
PY_INCLUDE	:= $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("include"))' 2>/dev/null)
PY_EXT		:= $(call PY_CFG,EXT_SUFFIX)
PY_PKG		:= $(O)/python/kvd
PY_MOD		:= $(PY_PKG)/_kvd$(PY_EXT)
PY_FILES	:= $(patsubst python/kvd/%,$(PY_PKG)/%,$(wildcard python/kvd/*.py))

# make install: $(PREFIX)/lib/python3.N/dist-packages, on Debian's
# sys.path for PREFIX /usr/local and /usr alike.
PYTHON_SITE	?= $(PREFIX)/lib/python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)/dist-packages

ifneq ($(wildcard $(PY_INCLUDE)/Python.h),)
python: $(PY_MOD) $(PY_FILES)
else
python:
	@echo "  PYTHON  $(PYTHON): no Python.h (python3-dev): the kvd package skipped"
endif

# RUNPATH: $(O)/ from $(O)/python/kvd, $(PREFIX)/lib from an installed
# $(PREFIX)/lib/python3.N/dist-packages/kvd (under any DESTDIR), PREFIX.
PY_SRCS		:= $(wildcard python/kvd/*.c)
$(PY_MOD): $(PY_SRCS) python/kvd/kvd_py.h $(LIB) | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      python/kvd/*.c (python)"
	$(Q)$(CC) $(BASE_CFLAGS) -isystem $(PY_INCLUDE) $(CFLAGS) -fPIC -shared \
		-fvisibility=hidden -o $@ $(PY_SRCS) -L$(O) -lkvclient \
		-Wl,-rpath,'$$ORIGIN/../..' -Wl,-rpath,'$$ORIGIN/../../..' \
		-Wl,-rpath,$(PREFIX)/lib

$(PY_PKG)/%.py: python/kvd/%.py
	@mkdir -p $(dir $@)
	$(Q)cp $< $@

.PHONY: python

# Library unit tests (test_lib_*) link the library's objects, statics too.
$(O)/tests/unit/test_lib_%: $(O)/tests/unit/test_lib_%.o $(LIB_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LIB_LIBS)

# Other unit tests: each links the daemon modules it tests and what they
# call (the lists below), cmocka and the system libraries.
kvd_objs	= $(patsubst %,$(O)/obj/kvd/%.o,$(1))
UNIT_LDLIBS	:= -lcmocka -luring -lxxhash -ldl -lm
# The namespace layers (ns over prefix, hold, slab, over pool).
UNIT_NS_OBJS	:= $(call kvd_objs,ns retain reclaim prefix hold pin slab pool log)
# The kvd.conf parser and what it calls (ctx.c: context policies).
UNIT_CONF_OBJS	:= $(call kvd_objs,config conf_parse conf_ctx options) \
		   $(O)/obj/libkvclient/ctx.o
# test_abi links nothing but itself.
$(O)/tests/unit/test_config:	$(UNIT_CONF_OBJS)
$(O)/tests/unit/test_options:	$(UNIT_CONF_OBJS)
$(O)/tests/unit/test_cuda:	$(call kvd_objs,cuda pinned extent pool log) $(O)/obj/libkvclient/cudadrv.o
$(O)/tests/unit/test_pool:	$(call kvd_objs,pool log)
$(O)/tests/unit/test_ring:	$(call kvd_objs,ring opdef extent tier tier_books tier_disk tier_file loop_io) $(UNIT_NS_OBJS)
$(O)/tests/unit/test_ns $(O)/tests/unit/test_ns_stress: $(UNIT_NS_OBJS) $(call kvd_objs,ns_debug)
$(O)/tests/unit/test_prefix $(O)/tests/unit/test_reclaim: $(UNIT_NS_OBJS) $(call kvd_objs,ns_debug)
$(O)/tests/unit/test_tenant:	$(UNIT_NS_OBJS) $(call kvd_objs,tenant) $(UNIT_CONF_OBJS)
# The kernels' references: through their library, as an engine links them.
$(O)/tests/unit/test_kernels_attn $(O)/tests/unit/test_kernels_convert \
	$(O)/tests/unit/test_kernels_ref: $(KERNELS_LIB)
$(O)/tests/unit/test_kernels_%: UNIT_LDLIBS += $(KERNELS_LINK)
$(O)/tests/unit/%: $(O)/tests/unit/%.o
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(UNIT_LDLIBS)

$(O)/tests/unit/%.o: tests/unit/%.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ikvd -Ikernels $(CFLAGS) -c -o $@ $<

$(O)/tests/integration/%: $(O)/obj/tests/integration/%.o $(O)/obj/tests/integration/harness.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LIB_LINK) -ldl

# ctx_policy checks kv_seq's masks with the reference decode kernel.
$(O)/tests/integration/ctx_policy: $(KERNELS_LIB)
$(O)/tests/integration/ctx_policy: LIB_LINK += -lkvkernels -lm

# soak_short runs the soak test (tests/soak/) for 7 s.
SOAK_OBJS	:= $(O)/obj/tests/soak/soak.o $(O)/obj/tests/soak/client.o
$(O)/tests/integration/soak_short: $(SOAK_OBJS)

# CUDA kernels (kernels/*.cu): compiled for Hopper (sm_90) and PTX, and
# linked with the static CUDA runtime, whenever nvcc exists. Warnings of
# nvcc, the host compiler and ptxas are errors, and so is a register spill
# in the decode and copy kernels (reshape_and_cache keeps ptxas' IEEE
# division subroutine, which ptxas counts as one). `make kernels-usage`
# prints the registers, shared memory and spills of every kernel.
NVCC_FLAGS	:= -O3 -std=c++17 -lineinfo -Iinclude -Ikernels \
		   -gencode arch=compute_90,code=sm_90 \
		   -gencode arch=compute_90,code=compute_90 -Werror all-warnings \
		   -Xcompiler -Wall,-Wextra,-Werror,-Wno-unused-parameter
KERNEL_OBJS	:= $(KERNEL_CU:kernels/%.cu=$(O)/obj/kernels/%.cu.o)
CUDA_LIBS	:= -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
GPU_CHECKS	:= $(O)/tests/gpu/kernels_check $(O)/tests/gpu/decode_bench

$(O)/obj/kernels/paged_attention.cu.o $(O)/obj/kernels/copy_blocks.cu.o: \
	NVCC_EXTRA := -Xptxas -warn-spills

$(O)/obj/kernels/%.cu.o: kernels/%.cu | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCC_FLAGS) $(DEPFLAGS) $(NVCC_EXTRA) -c -o $@ $<

# The static libkvkernels with the CUDA kernels: the same C code as
# libkvkernels.so (references, layout and argument checks, conversions,
# scales) and the kv_cuda_* kernels. Link it instead of -lkvkernels.
$(O)/libkvkernels.a: $(KERNEL_OBJS) $(KERNEL_REF_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# Host programs linked with the kernels (tests/gpu/run.sh runs them):
# kernels_check against the C references, decode_bench's bandwidth table.
$(GPU_CHECKS): $(O)/tests/gpu/%: tests/gpu/%.c $(O)/libkvkernels.a $(LIB) | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ikernels -I$(CUDA_HOME)/include $(CFLAGS) -o $@ $< \
		$(O)/libkvkernels.a -L$(O) -lkvclient -Wl,-rpath,'$$ORIGIN/../..' $(CUDA_LIBS)

# Two engine processes on the cuda backend (tests/gpu/run.sh): the CUDA
# runtime, linked statically, writes and reads blocks on the device.
$(O)/tests/gpu/cuda_clients: tests/gpu/cuda_clients.c $(LIB) | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -I$(CUDA_HOME)/include $(CFLAGS) -o $@ $< \
		-L$(O) -lkvclient -Wl,-rpath,'$$ORIGIN/../..' \
		-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread

ifneq ($(NVCC),)
kernels: $(O)/libkvkernels.a $(GPU_CHECKS) $(O)/tests/gpu/cuda_clients

kernels-usage:
	$(Q)for f in $(KERNEL_CU); do \
		$(NVCC) $(NVCC_FLAGS) --resource-usage -c -o /dev/null $$f 2>&1 | \
		sed -n "s/.*Compiling entry function '\([^']*\)'.*/\1/p; s/.*\(Used .*\)/    \1/p; s/^ *\([0-9]* bytes stack.*\)/    \1/p"; \
	done
else
kernels kernels-usage:
	@echo "  CUDA    nvcc not found (PATH, CUDA_HOME=$(CUDA_HOME)): GPU code skipped"
endif

# ---- gpu bundle ------------------------------------------------------------
# tests/gpu/run.sh and every program it runs, with the shared libraries
# they load (glibc and the driver aside), in one folder for a GPU host
# without the build's packages: $(O)/gpu-bundle/ and its .tar.gz
# (scripts/gpu-bundle.sh; README "The GPU check on a bare host").
gpu-bundle: all kernels $(O)/tests/unit/test_cuda $(O)/tests/unit/test_lib_cuda
	$(Q)O=$(O) NVCC=$(NVCC) PYTHON=$(PYTHON) sh scripts/gpu-bundle.sh $(O)/gpu-bundle

.PHONY: gpu-bundle
# ---- end of gpu bundle -----------------------------------------------------

test: all $(UNIT_BINS) $(INTEG_BINS) man-check clang-check layering-check
	$(Q)O=$(O) sh tests/runtests.sh

# The layers call one way: no circle of calls among the objects of kvd/,
# libkvclient/, kernels/ or tools/ (nm and tsort; tests/layering-check.sh);
# and README's Layout names every source file (tests/layout-check.sh).
layering-check: all
	$(Q)sh tests/layering-check.sh $(O)
	$(Q)sh tests/layout-check.sh

# Every kv_ symbol either library exports has a man3 page, and every
# page lints clean.
man-check: $(LIB) $(KERNELS_LIB) | $(DEPS_FIRST)
	$(Q)sh tests/man-check.sh $(LIB) $(KERNELS_LIB)

# The tree must also build warning-free under clang.
clang-check: | $(DEPS_FIRST)
	@echo "  CLANG   -fsyntax-only $(words $(KVD_SRCS) $(LIB_SRCS)) files + tools + tests"
	$(Q)for f in $(KVD_SRCS) $(LIB_SRCS) $(wildcard kernels/*.c) tools/*.c tools/kvbench/*.c tests/unit/*.c tests/integration/*.c tests/soak/*.c; do \
		clang $(BASE_CFLAGS) -Ikvd -Ikernels -fsyntax-only $$f || exit 1; done
	$(Q)[ ! -f $(PY_INCLUDE)/Python.h ] || for f in $(PY_SRCS); do \
		clang $(BASE_CFLAGS) -isystem $(PY_INCLUDE) -fsyntax-only $$f || exit 1; done

# The whole suite again under AddressSanitizer and UBSan, in build-check/.
SAN_FLAGS	:= -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
		   -fno-sanitize-recover=undefined
check:
	$(Q)$(MAKE) O=build-check CFLAGS="$(SAN_FLAGS)" NVCC= test
	$(Q)$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SECONDS)

# ---- fuzz -----------------------------------------------------------------
# libFuzzer targets (tests/fuzz/): ctrl (HELLO check and admin requests),
# sqe (the SQE decoder behind a ring), conf (kvd.conf) and trace (the
# trace readers), built with clang, ASan and UBSan in $(FUZZ_O)/.
# `make fuzz` runs each for FUZZ_SECONDS on its seed corpus, then replays
# every input saved in tests/fuzz/regress/<target>/ (tests/fuzz/run.sh).
FUZZ_O		?= build-fuzz
FUZZ_SECONDS	?= 30
FUZZ_CC		?= clang
FUZZ_TARGETS	:= ctrl sqe conf trace
FUZZ_SAN	:= -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		   -fno-sanitize-recover=undefined
FUZZ_BINS	:= $(FUZZ_TARGETS:%=$(FUZZ_O)/fuzz_%)
FUZZ_UTIL	:= $(FUZZ_O)/obj/tests/fuzz/fuzz_util.o
# The daemon's modules but main.c and the HTTP server it alone starts,
# and the CUDA driver table; kvd_log and kvd_now_ns wrapped
# (tests/fuzz/fuzz_kvd.c).
FUZZ_KVD_OBJS	:= $(patsubst %.c,$(FUZZ_O)/obj/%.o,$(filter-out kvd/main.c \
		   kvd/metrics_http.c,$(KVD_SRCS)) \
		   libkvclient/cudadrv.c libkvclient/ctx.c) $(FUZZ_O)/obj/tests/fuzz/fuzz_kvd.o
FUZZ_KVD_LD	:= -Wl,--wrap=kvd_log -Wl,--wrap=kvd_now_ns -luring -lxxhash -ldl -lm \
		   $(SYSTEMD_LIBS) $(EVENTS_LIBS)
# The library's modules (not the kernels': no fuzz target calls them).
FUZZ_LIB_OBJS	:= $(patsubst %.c,$(FUZZ_O)/obj/%.o,$(LIB_SRCS))

$(FUZZ_O)/obj/%.o: %.c tests/fuzz/coverage.ignore | fuzz-cc-check
	@mkdir -p $(dir $@)
	@echo "  CC      $< (fuzz)"
	$(Q)$(FUZZ_CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ikvd -Ikernels -Itools -Itests/fuzz $(FUZZ_SAN) \
		-fsanitize=fuzzer-no-link \
		-fsanitize-coverage-ignorelist=tests/fuzz/coverage.ignore -c -o $@ $<

$(FUZZ_O)/fuzz_ctrl $(FUZZ_O)/fuzz_sqe: $(FUZZ_O)/fuzz_%: $(FUZZ_O)/obj/tests/fuzz/fuzz_%.o $(FUZZ_UTIL) $(FUZZ_KVD_OBJS)
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(FUZZ_KVD_LD)

$(FUZZ_O)/fuzz_conf: $(FUZZ_O)/obj/tests/fuzz/fuzz_conf.o $(FUZZ_UTIL) $(FUZZ_O)/obj/kvd/config.o $(FUZZ_O)/obj/kvd/conf_parse.o $(FUZZ_O)/obj/kvd/conf_ctx.o \
		$(FUZZ_O)/obj/libkvclient/ctx.o
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^

$(FUZZ_O)/fuzz_trace: $(FUZZ_O)/obj/tests/fuzz/fuzz_trace.o $(FUZZ_UTIL) $(patsubst %.c,$(FUZZ_O)/obj/%.o,$(wildcard tools/trace*.c)) $(FUZZ_LIB_OBJS)
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ -ljson-c $(LIB_LIBS)

# libFuzzer ships with clang (Debian: libclang-rt-dev); say so if absent.
fuzz-cc-check:
	@mkdir -p $(FUZZ_O)
	$(Q)printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ return 0; }\n' | \
		$(FUZZ_CC) -x c -fsanitize=fuzzer -o $(FUZZ_O)/.cc-check - 2>/dev/null || { \
		echo "fuzz: '$(FUZZ_CC) -fsanitize=fuzzer' does not link: libFuzzer is missing" >&2; \
		echo "fuzz: install clang and libclang-rt-dev (scripts/install-deps.sh), or set FUZZ_CC" >&2; \
		exit 1; }

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	$(Q)FUZZ_O=$(FUZZ_O) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(FUZZ_TARGETS)

fuzz-clean:
	rm -rf $(FUZZ_O)

.PHONY: fuzz fuzz-build fuzz-cc-check fuzz-clean
# ---- end of fuzz ----------------------------------------------------------

# ---- ring stress (tests/unit/test_ring_stress.c) -------------------------
# The daemon's kvd/ring.c and the library's libkvclient/queue.c on two
# threads, with a fake op handler in the test. Both are compiled again,
# unchanged, with tests/unit/ring_hooks.h forced in: around every access
# of a shared ring word they call the test's kv_ring_hook() (yields, sleeps).
# A link line of its own (the hooked copies, not kvd/ring.o). 3 s in
# `make test`; `make ring-stress` runs it for RING_STRESS_SECONDS (30).
RING_STRESS	:= $(O)/tests/unit/test_ring_stress
RING_HOOKED	:= $(O)/obj/tests/unit/ring_hooked.o $(O)/obj/tests/unit/queue_hooked.o

$(O)/obj/tests/unit/ring_hooked.o: kvd/ring.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (ring hooks)"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ikvd $(CFLAGS) -include tests/unit/ring_hooks.h -c -o $@ $<

$(O)/obj/tests/unit/queue_hooked.o: libkvclient/queue.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (ring hooks)"
	$(Q)$(CC) $(BASE_CFLAGS) $(DEPFLAGS) -Ilibkvclient $(CFLAGS) -include tests/unit/ring_hooks.h -c -o $@ $<

$(RING_STRESS): $(RING_STRESS).o $(RING_HOOKED) $(O)/obj/kvd/log.o
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lpthread

ring-stress: $(RING_STRESS)
	$(Q)RING_STRESS_SECONDS=$${RING_STRESS_SECONDS:-30} $(RING_STRESS)

# ---- soak (tests/soak/soak.c) --------------------------------------------
# kvd and 8 client processes doing random prefix-cache work with content
# checks, killed with SIGKILL and restarted at random, then the books
# checked: `make soak` for SOAK_SECONDS (60; tests/soak/main.c). A 7 s
# run of the same code is the integration test soak_short
# (tests/integration/soak_short.c, linked with SOAK_OBJS above).
SOAK		:= $(O)/tests/soak/soak

$(SOAK): $(O)/obj/tests/soak/main.o $(SOAK_OBJS) $(O)/obj/tests/integration/harness.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(LIB_LINK) -ldl

soak: all $(SOAK)
	$(Q)$(SOAK)

# ---- tsan ------------------------------------------------------------------
# The threaded code under ThreadSanitizer, in build-tsan/: the ring stress
# test (both sides of a ring on two threads). TSAN does not model the
# standalone fences (kv_smp_mb: store-load order for the NEED_WAKEUP flags,
# atomics on both sides) and gcc says so: -Wno-tsan.
TSAN_FLAGS	:= -O1 -g -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
tsan:
	$(Q)$(MAKE) O=build-tsan CFLAGS="$(TSAN_FLAGS)" NVCC= \
		build-tsan/tests/unit/test_ring_stress
	$(Q)TSAN_OPTIONS="halt_on_error=1 exitcode=66 $(TSAN_OPTIONS)" \
		RING_STRESS_SECONDS=$${RING_STRESS_SECONDS:-10} \
		build-tsan/tests/unit/test_ring_stress

# ---- valgrind ----------------------------------------------------------------
# Integration tests under valgrind memcheck, the test programs (clients)
# and kvd alike (the harness starts kvd behind $$KVD_TEST_WRAPPER), built
# -O1 -g in build-valgrind/; tests/valgrind.sh runs them. A memcheck error
# or a definite leak fails a test. Not in CI: needs the valgrind package.
VALGRIND	:= valgrind -q --error-exitcode=1 --leak-check=full \
		   --errors-for-leak-kinds=definite --track-fds=no
# Not huge_pool (a 1 TiB pool: beyond valgrind's address space), event_loop
# (setrlimit below valgrind's own fds) and tenants (its forked engine exits
# holding its client: a definite leak in the test, not the library).
VALGRIND_TESTS	?= basic multiproc client_killed prefix lifecycle cow_extents \
		   extents_idle hostile_ring bad_input wait soak_short
valgrind:
	$(Q)command -v valgrind >/dev/null || \
		{ echo "valgrind not found: apt-get install valgrind"; exit 1; }
	$(Q)$(MAKE) O=build-valgrind CFLAGS="-O1 -g" NVCC= \
		build-valgrind/kvd build-valgrind/kvctl \
		$(VALGRIND_TESTS:%=build-valgrind/tests/integration/%)
	$(Q)O=build-valgrind VALGRIND="$(VALGRIND)" \
		sh tests/valgrind.sh $(VALGRIND_TESTS)

demo: all
	$(Q)sh tools/demo.sh $(O)

# Two vLLM engine processes (vLLM's real scheduler and offloading code,
# the vendored sources) sharing a system prompt through kvd.
demo-vllm: all
	$(Q)O=$(O) $(PYTHON) tools/vllm_demo.py

# Benchmarks, not tests: they report figures and the goals of issue 8 and
# never fail on a timing. Each starts its own kvd (kvbench(8) BENCHMARKS);
# the JSON reports stay in $(O)/bench-*.json, the last step sums them up.
BENCH_WORKLOAD	?= ../shared/bench/shared_prompts.kvdtrc
BENCH_BATCH	:= --private-kvd -p 1 -b 256 --min-tokens 16 --max-tokens 16 \
		   -n 200000 --layers 1 --kv-heads 1 --head-dim 4 --perf-stat
# One SQE allocates, one releases a whole 8192-token (512-block) sequence;
# the books only (--no-verify), as the figure is kvd's, not memset's.
BENCH_SEQ	:= --private-kvd -p 1 -b 2 --min-tokens 8192 --max-tokens 8192 \
		   -n 20000 --layers 1 --kv-heads 1 --head-dim 4 --no-verify \
		   --perf-stat
bench: all
	$(Q)sh scripts/install-deps.sh --bench
	$(Q)rm -f $(O)/bench-*.json
	@echo "  BENCH   round-trip floors"
	$(Q)$(O)/kvbench --floor --json $(O)/bench-floor.json
	@echo "  BENCH   block hashing"
	$(Q)$(O)/kvbench --hash-bench --json $(O)/bench-hash.json
	@echo "  BENCH   shared_prompts workload"
	$(Q)if [ -f $(BENCH_WORKLOAD) ]; then \
		$(O)/kvbench --workload $(BENCH_WORKLOAD) --json $(O)/bench-workload.json; \
	else echo "$(BENCH_WORKLOAD) not found: skipped"; fi
	@echo "  BENCH   redis"
	$(Q)$(O)/kvbench --redis --json $(O)/bench-redis.json
	@echo "  BENCH   batched ALLOC+RELEASE"
	$(Q)$(O)/kvbench $(BENCH_BATCH) -q --json $(O)/bench-batch.json
	@echo "  BENCH   ALLOC+RELEASE of whole sequences"
	$(Q)$(O)/kvbench $(BENCH_SEQ) -q --json $(O)/bench-seq.json
	$(Q)$(O)/kvbench --bench-summary $(O)

# kvd's vLLM offloading plug-in (kvd.vllm) against vLLM's own CPU
# offloading, in one run (issue 15): scheduler-side cost per request of
# the managers on the shared_prompts workload, and the handlers' copy
# bandwidth against memcpy. Needs the vendored vLLM beside the checkout
# (../shared/vendor; skipped without it). The docstring of
# scripts/vllm_bench.py says exactly what it measures.
bench-vllm: all
	@echo "  BENCH   kvd.vllm vs vLLM's CPU offloading"
	$(Q)$(PYTHON) scripts/vllm_bench.py --json $(O)/bench-vllm.json; \
		rc=$$?; [ $$rc -eq 77 ] && exit 0; exit $$rc

.PHONY: bench bench-vllm

# make install / make uninstall, under $(DESTDIR)$(PREFIX): what `all`
# built, nothing rebuilt; uninstall removes exactly what install put.
BINDIR		?= $(PREFIX)/bin
SBINDIR		?= $(PREFIX)/sbin
LIBDIR		?= $(PREFIX)/lib
INCLUDEDIR	?= $(PREFIX)/include
MANDIR		?= $(PREFIX)/share/man
DOCDIR		?= $(PREFIX)/share/doc/kvd
PKGCONFIGDIR	?= $(LIBDIR)/pkgconfig
UNITDIR		?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR	?= $(PREFIX)/lib/sysusers.d
MAN_PAGES	:= $(wildcard man/man3/*.3 man/man5/*.5 man/man7/*.7 man/man8/*.8)
HEADERS		:= $(wildcard include/kv/*.h)
D		:= $(DESTDIR)

install: all
	install -d $(D)$(BINDIR) $(D)$(SBINDIR) $(D)$(LIBDIR) $(D)$(INCLUDEDIR)/kv \
		$(D)$(PKGCONFIGDIR) $(D)$(DOCDIR) $(D)$(UNITDIR) $(D)$(SYSUSERSDIR) \
		$(addprefix $(D)$(MANDIR)/man,3 5 7 8)
	install -m 755 $(O)/kvd $(D)$(SBINDIR)/kvd
	install -m 755 $(O)/kvctl $(O)/kvbench $(D)$(BINDIR)/
	install -m 755 $(LIB) $(KERNELS_LIB) $(D)$(LIBDIR)/
	install -m 644 $(O)/libkvclient.a $(D)$(LIBDIR)/
	ln -sf $(SONAME) $(D)$(LIBDIR)/libkvclient.so
	ln -sf $(KERNELS_SONAME) $(D)$(LIBDIR)/libkvkernels.so
	install -m 644 $(HEADERS) $(D)$(INCLUDEDIR)/kv/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LIB_LIBS)|' \
		libkvclient/kvclient.pc.in >$(D)$(PKGCONFIGDIR)/kvclient.pc
	for f in $(MAN_PAGES); do \
		cp -P "$$f" $(D)$(MANDIR)/man$${f##*.}/ || exit 1; done
	install -m 644 etc/kvd.conf $(D)$(DOCDIR)/kvd.conf.example
	sed 's|/usr/sbin/kvd|$(SBINDIR)/kvd|' etc/kvd.service >$(D)$(UNITDIR)/kvd.service
	install -m 644 etc/kvd.sysusers $(D)$(SYSUSERSDIR)/kvd.conf
	$(Q)if [ -f $(PY_MOD) ]; then \
		install -d $(D)$(PYTHON_SITE)/kvd && \
		install -m 644 $(PY_MOD) $(PY_FILES) $(D)$(PYTHON_SITE)/kvd/ && \
		echo "  INSTALL the kvd Python package in $(D)$(PYTHON_SITE)/kvd"; fi

uninstall:
	rm -f $(D)$(SBINDIR)/kvd $(D)$(BINDIR)/kvctl $(D)$(BINDIR)/kvbench \
		$(addprefix $(D)$(LIBDIR)/,$(SONAME) $(KERNELS_SONAME) libkvclient.so \
			libkvkernels.so libkvclient.a) \
		$(D)$(PKGCONFIGDIR)/kvclient.pc \
		$(addprefix $(D)$(INCLUDEDIR)/kv/,$(notdir $(HEADERS))) \
		$(foreach f,$(MAN_PAGES),$(D)$(MANDIR)/man$(subst .,,$(suffix $(f)))/$(notdir $(f))) \
		$(D)$(DOCDIR)/kvd.conf.example $(D)$(UNITDIR)/kvd.service \
		$(D)$(SYSUSERSDIR)/kvd.conf
	rm -f $(addprefix $(D)$(PYTHON_SITE)/kvd/,$(notdir $(PY_MOD) $(PY_FILES)))
	-rmdir $(D)$(INCLUDEDIR)/kv $(D)$(DOCDIR) $(D)$(PYTHON_SITE)/kvd 2>/dev/null

clean:
	rm -rf $(O)

# The header dependencies the compiles wrote (DEPFLAGS).
-include $(shell find $(O) $(FUZZ_O) -name '*.d' 2>/dev/null)

.PHONY: all deps test check man-check clang-check layering-check demo demo-vllm bench-vllm install uninstall clean kernels kernels-usage \
	ring-stress soak tsan valgrind
.SECONDARY:
