#!/bin/sh
# SPDX-License-Identifier: MIT
# The GPU check as one folder for a bare GPU host (`make gpu-bundle`):
# tests/gpu/run.sh as run.sh, kvd, kvctl and kvbench in bin/, the programs
# it runs (kernels_check, decode_bench, cuda_clients, the mocked-driver
# unit tests, vllm_cuda.py) in tests/, the kvd Python package in python/
# and the vendored vLLM files it loads in vendor/ (when the developers'
# workspace has them), and in lib/ every shared library they load but
# glibc's, found with ldd so that a new library joins by itself. Each
# program and library looks in lib/ first (RUNPATH $ORIGIN/../lib, and
# $ORIGIN in lib/), so the host needs only glibc >= the build machine's,
# x86_64 and, for the GPU checks, the NVIDIA driver (libcuda.so.1 is
# dlopen'ed, the CUDA runtime is linked statically). Also packed as
# $B.tar.gz. Run from the tree's root with O set; the folder is $1 or
# $O/gpu-bundle.
set -eu
O=${O:-build}
B=${1:-$O/gpu-bundle}
MAX_BYTES=$((64 << 20))

BINS="kvd kvctl kvbench"
CHECKS="tests/gpu/kernels_check tests/gpu/decode_bench tests/gpu/cuda_clients \
tests/unit/test_cuda tests/unit/test_lib_cuda"

die() { echo "gpu-bundle: $*" >&2; exit 1; }

# glibc's own libraries: the host's, never the bundle's.
is_glibc() {
	case $1 in
	ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
	librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libmvec.so.* | \
	libnsl.so.* | libBrokenLocale.so.* | libc_malloc_debug.so.*) return 0 ;;
	esac
	return 1
}

# Copies into lib/ the real file of every non-glibc library ldd finds
# for $1 (a program in the build tree, so its own RUNPATH finds $O's).
copy_libs() {
	ldd "$1" >"$B/.ldd" 2>&1 || die "ldd $1 failed: $(cat "$B/.ldd")"
	! grep -q "not found" "$B/.ldd" || die "$1: $(grep "not found" "$B/.ldd")"
	while read -r name arrow path _; do
		if [ "$arrow" != "=>" ] || [ ! -f "$path" ] || is_glibc "$name"; then
			continue
		fi
		[ -e "$B/lib/$name" ] || cp "$(readlink -f "$path")" "$B/lib/$name"
	done <"$B/.ldd"
	rm -f "$B/.ldd"
}

# The Python package's cuda check (tests/gpu/vllm_cuda.py): the package
# as built ($O/python: the extension finds libkvclient in lib/), and the
# files of the vendored vLLM (../shared/vendor) that kvd.vllm loads, as
# they are: the vendored files it imports, found by importing them.
VENDOR=${KVD_VLLM_VENDOR:-../shared/vendor}
python_part() {
	[ -d "$O/python/kvd" ] || return 0
	mkdir -p "$B/python"
	cp -r "$O/python/kvd" "$B/python/"
	rm -rf "$B/python/kvd/__pycache__" "$B"/python/kvd/*.d
	cp tests/gpu/vllm_cuda.py "$B/tests/"
	[ -f "$VENDOR/vllm_shim.py" ] || return 0
	files=$(${PYTHON:-python3} - "$VENDOR" "$O/python" <<-'EOF'
	import os, sys
	vendor, pkg = sys.argv[1], sys.argv[2]
	sys.dont_write_bytecode = True
	sys.path[:0] = [vendor, pkg]
	import vllm_shim
	vllm_shim.install()
	import kvd.vllm  # noqa: F401
	import vllm.v1.kv_offload.factory  # noqa: F401
	root = os.path.realpath(vendor)
	used = {os.path.realpath(m.__file__) for m in list(sys.modules.values())
	        if getattr(m, "__file__", None)}
	for f in sorted(used):
	    if f.startswith(root + os.sep):
	        print(os.path.relpath(f, root))
	# read, not imported, by the shim (its PARTIAL files)
	print("vllm-v0.19.0/vllm/utils/torch_utils.py")
	print("vllm-v0.19.0/vllm/v1/utils.py")
	EOF
	) || { echo "gpu-bundle: the vendored vLLM does not import: kvd.vllm's cuda check left out" >&2; return 0; }
	babs=$(cd "$B" && pwd -P)
	mkdir -p "$babs/vendor"
	# shellcheck disable=SC2086 # one path a word
	(cd "$VENDOR" && cp --parents $(echo "$files" | sort -u) "$babs/vendor/")
}

command -v patchelf >/dev/null || sh scripts/install-deps.sh --bundle
for f in $BINS $CHECKS; do
	[ -x "$O/$f" ] || die "$O/$f is missing (is nvcc there? make kernels)"
done

rm -rf "$B" "$B.tar.gz"
mkdir -p "$B/bin" "$B/tests" "$B/lib"
for f in $BINS; do
	cp "$O/$f" "$B/bin/"
	copy_libs "$O/$f"
done
for f in $CHECKS; do
	cp "$O/$f" "$B/tests/"
	copy_libs "$O/$f"
done
cp tests/gpu/run.sh "$B/run.sh"
chmod 755 "$B/run.sh"
python_part

# shellcheck disable=SC2016 # $ORIGIN is the loader's, not the shell's
for f in "$B"/bin/* "$B"/tests/*; do
	case $f in *.py) continue ;; esac
	patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
# shellcheck disable=SC2016
for f in "$B"/python/kvd/*.so; do
	[ -f "$f" ] && patchelf --set-rpath '$ORIGIN/../../lib' "$f"
done
# A library that needs another bundled one finds it beside itself.
for f in "$B"/lib/*; do
	for n in $(patchelf --print-needed "$f"); do
		if [ -e "$B/lib/$n" ]; then
			# shellcheck disable=SC2016
			patchelf --set-rpath '$ORIGIN' "$f"
			break
		fi
	done
done

# Every library but glibc's must now resolve into lib/.
lib=$(cd "$B/lib" && pwd -P)
for f in "$B"/bin/* "$B"/tests/* "$B"/python/kvd/*.so; do
	case $f in *.py) continue ;; esac
	[ -f "$f" ] || continue
	env -u LD_LIBRARY_PATH ldd "$f" | while read -r name arrow path _; do
		[ "$arrow" = "=>" ] || continue
		is_glibc "$name" && continue
		[ "$(readlink -f "$path")" = "$lib/$name" ] ||
			die "$f: $name resolves to $path, not the bundle's lib/"
	done
done

# The newest glibc symbol version any file of the bundle asks for.
glibc=$(for f in "$B"/bin/* "$B"/tests/* "$B"/lib/*; do
	case $f in *.py) ;; *) objdump -T "$f" ;; esac; done |
	grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
{
	echo "kvd $(cat VERSION) GPU check bundle"
	echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
	echo "needs: glibc >= $glibc (built on $(ldd --version | sed -n '1s/.* //p')), x86_64, the NVIDIA driver (libcuda.so.1) of a CUDA release >= nvcc's below"
	echo "nvcc: $("${NVCC:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([^,]*\),.*/\1/p' || true)"
	echo "run: sh run.sh (exit 0 all passed, 1 a check failed, 77 no GPU)"
	echo "libraries: $(cd "$B/lib" && echo *)"
} >"$B/BUNDLE"

tar -C "$(dirname "$B")" -czf "$B.tar.gz" "$(basename "$B")"
bytes=$(du -sb "$B" | cut -f1)
[ "$bytes" -le "$MAX_BYTES" ] || die "$B is $bytes bytes, over $MAX_BYTES"
echo "  BUNDLE  $B ($((bytes >> 20)) MiB), $B.tar.gz ($(($(stat -c %s "$B.tar.gz") >> 20)) MiB)"
