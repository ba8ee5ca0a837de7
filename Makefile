# SPDX-License-Identifier: MIT
# kvd: daemon, client library, tools, tests, man pages.
#   make          build everything (installs missing Debian packages first)
#   make test     unit + integration tests, man page lint, clang build check
#   make demo     kvd on the host backend + kvbench with 4 engine processes
#   make install  PREFIX=/usr/local

VERSION		:= $(shell cat VERSION)
VERSION_MAJOR	:= $(word 1,$(subst ., ,$(VERSION)))
SONAME		:= libkvclient.so.$(VERSION_MAJOR)

CC		?= gcc
CFLAGS		?= -O2 -g
WARN		:= -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BASE_CFLAGS	:= -std=gnu11 -D_GNU_SOURCE -Iinclude -DKV_VERSION=\"$(VERSION)\" $(WARN)
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

KVD_OBJS	:= $(KVD_SRCS:%.c=$(O)/obj/%.o) $(O)/obj/libkvclient/cudadrv.o
# The kernels' C references (kv_ref_*, kv_layout_init, ...) are in the library.
LIB_OBJS	:= $(LIB_SRCS:%.c=$(O)/pic/%.o) $(KERNEL_SRCS:%.c=$(O)/pic/%.o)
KVD_CORE_OBJS	:= $(filter-out $(O)/obj/kvd/main.o,$(KVD_OBJS))
KERNEL_REF_OBJS	:= $(KERNEL_SRCS:%.c=$(O)/obj/%.o)

LIB		:= $(O)/$(SONAME)
UNIT_BINS	:= $(UNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%) \
		   $(LIBUNIT_SRCS:tests/unit/%.c=$(O)/tests/unit/%)
LIB_LIBS	:= -lxxhash -lcrypto -ldl -lm
INTEG_BINS	:= $(INTEG_SRCS:tests/integration/%.c=$(O)/tests/integration/%)
TOOLS		:= $(O)/kvctl $(O)/kvbench
DEPS_STAMP	:= $(O)/.deps-ok

ifeq ($(V),1)
Q :=
else
Q := @
endif

all: $(O)/kvd $(LIB) $(TOOLS) kernels

$(DEPS_STAMP): scripts/install-deps.sh
	@mkdir -p $(O)
	$(Q)sh scripts/install-deps.sh
	@touch $@

$(O)/obj/%.o: %.c $(DEPS_STAMP) $(wildcard include/kv/*.h kvd/*.h tools/*.h tests/integration/*.h kernels/*.h libkvclient/*.h)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(BASE_CFLAGS) -Ikernels $(CFLAGS) -c -o $@ $<

$(O)/pic/%.o: %.c $(DEPS_STAMP) $(wildcard include/kv/*.h libkvclient/*.h kernels/*.h)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (pic)"
	$(Q)$(CC) $(BASE_CFLAGS) $(CFLAGS) -fPIC -c -o $@ $<

$(O)/kvd: $(KVD_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -luring -ljemalloc -lxxhash -ldl

$(LIB): $(LIB_OBJS) libkvclient/libkvclient.map
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script=libkvclient/libkvclient.map -o $@ $(LIB_OBJS) $(LIB_LIBS)
	$(Q)ln -sf $(SONAME) $(O)/libkvclient.so

LIB_LINK	:= -L$(O) -lkvclient -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/../..' \
		   -Wl,-rpath,$(PREFIX)/lib

$(O)/kvctl: $(O)/obj/tools/kvctl.o $(O)/obj/tools/emit.o $(O)/obj/tools/admin.o
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^

$(O)/kvbench: $(O)/obj/tools/kvbench.o $(O)/obj/tools/emit.o $(O)/obj/tools/trace.o $(O)/obj/tools/admin.o $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $(O)/obj/tools/kvbench.o $(O)/obj/tools/emit.o $(O)/obj/tools/trace.o $(O)/obj/tools/admin.o $(LIB_LINK) -lm -ljson-c -lxxhash

# Library unit tests (test_lib_*) link the library's objects, statics too.
$(O)/tests/unit/test_lib_%: $(O)/tests/unit/test_lib_%.o $(LIB_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(LIB_LIBS)

# Unit tests link only the daemon modules (and cmocka).
$(O)/tests/unit/%: $(O)/tests/unit/%.o $(KVD_CORE_OBJS) $(KERNEL_REF_OBJS)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ -lcmocka -luring -lxxhash -ldl -lm

$(O)/tests/unit/%.o: tests/unit/%.c $(DEPS_STAMP) $(wildcard include/kv/*.h kvd/*.h kvd/*.c kernels/*.h tests/unit/*.h libkvclient/*.h)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(BASE_CFLAGS) -Ikvd -Ikernels $(CFLAGS) -c -o $@ $<

$(O)/tests/integration/%: $(O)/obj/tests/integration/%.o $(O)/obj/tests/integration/harness.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $< $(O)/obj/tests/integration/harness.o $(LIB_LINK) -ldl

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

$(O)/obj/kernels/%.cu.o: kernels/%.cu kernels/kv_kernels.h include/kv/kernels.h include/kv/abi.h
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCC_FLAGS) $(NVCC_EXTRA) -c -o $@ $<

# The CUDA kernels and the C code they share with the references.
$(O)/libkvkernels.a: $(KERNEL_OBJS) $(KERNEL_REF_OBJS)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# Host programs linked with the kernels (tests/gpu/run.sh runs them):
# kernels_check against the C references, decode_bench's bandwidth table.
$(GPU_CHECKS): $(O)/tests/gpu/%: tests/gpu/%.c $(O)/libkvkernels.a $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(BASE_CFLAGS) -Ikernels -I$(CUDA_HOME)/include $(CFLAGS) -o $@ $< \
		$(O)/libkvkernels.a -L$(O) -lkvclient -Wl,-rpath,'$$ORIGIN/../..' $(CUDA_LIBS)

# Two engine processes on the cuda backend (tests/gpu/run.sh): the CUDA
# runtime, linked statically, writes and reads blocks on the device.
$(O)/tests/gpu/cuda_clients: tests/gpu/cuda_clients.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(BASE_CFLAGS) -I$(CUDA_HOME)/include $(CFLAGS) -o $@ $< \
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

test: all $(UNIT_BINS) $(INTEG_BINS) man-check clang-check
	$(Q)O=$(O) sh tests/runtests.sh

# Every exported kv_ symbol has a man3 page, and every page lints clean.
man-check: $(LIB)
	$(Q)sh tests/man-check.sh $(LIB)

# The tree must also build warning-free under clang.
clang-check: $(DEPS_STAMP)
	@echo "  CLANG   -fsyntax-only $(words $(KVD_SRCS) $(LIB_SRCS)) files + tools + tests"
	$(Q)for f in $(KVD_SRCS) $(LIB_SRCS) $(wildcard kernels/*.c) tools/*.c tests/unit/*.c tests/integration/*.c; do \
		clang $(BASE_CFLAGS) -Ikvd -Ikernels -fsyntax-only $$f || exit 1; done

# The whole suite again under AddressSanitizer and UBSan, in build-check/.
SAN_FLAGS	:= -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
		   -fno-sanitize-recover=undefined
check:
	$(Q)$(MAKE) O=build-check CFLAGS="$(SAN_FLAGS)" NVCC= test

demo: all
	$(Q)sh tools/demo.sh $(O)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin \
		$(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/kv \
		$(DESTDIR)$(PREFIX)/share/man/man3 $(DESTDIR)$(PREFIX)/share/man/man7 \
		$(DESTDIR)$(PREFIX)/share/man/man8
	install -m 755 $(O)/kvd $(DESTDIR)$(PREFIX)/sbin/kvd
	install -m 755 $(O)/kvctl $(O)/kvbench $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libkvclient.so
	install -m 644 include/kv/*.h $(DESTDIR)$(PREFIX)/include/kv/
	cp -P man/man3/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	for f in man/man7/*.7; do [ ! -e "$$f" ] || cp -P "$$f" $(DESTDIR)$(PREFIX)/share/man/man7/; done
	install -d $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/doc/kvd
	cp -P man/man5/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 644 etc/kvd.conf $(DESTDIR)$(PREFIX)/share/doc/kvd/kvd.conf.example
	cp -P man/man8/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/

clean:
	rm -rf $(O)

.PHONY: all test check man-check clang-check demo install clean kernels kernels-usage
.SECONDARY:
