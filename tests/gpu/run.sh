#!/bin/sh
# SPDX-License-Identifier: MIT
# Every GPU-side check, for a machine with a CUDA device. Runs in two
# places: in the tree (sh tests/gpu/run.sh), where it first builds with
# `make gpu-bundle` and then runs the bundle it made, and as run.sh inside
# that bundle (a BUNDLE file beside it) on a GPU host without make, the
# build's packages or the source tree, using the bundle's prebuilt bin/,
# tests/ and lib/. Either way it writes only to a temporary directory.
#   - kvd, kvctl and kvbench on the host backend (no GPU needed: proves
#     the programs and their libraries load and work on this host),
#   - the cuda backend's mocked-driver unit tests (no GPU needed),
# then, with a CUDA device (else it stops here, exit 77):
#   - the kernels (copy_blocks, reshape_and_cache, paged_attention_decode)
#     against their C references (kernels_check),
#   - the decode kernel's memory bandwidth table (decode_bench),
#   - kvd --backend auto choosing cuda,
#   - two engine processes writing blocks on the device and reading each
#     other's committed blocks, COW on the device (vmm and legacy exports),
#   - kvbench on the cuda backend, the pool shrinking back when idle,
#   - the host tier behind a device pool: evicted blocks copied into
#     pinned host memory and back, every byte checked,
#   - kvd killed and restarted under a client, which reconnects,
#   - device memory given back when kvd stops,
#   - the Python package: pool views on the device, kvd.vllm's device
#     copies (tests/gpu/vllm_cuda.py; SKIP without python3 and torch).
# Prints PASS/FAIL per check and "N passed, N failed"; exit 0 when all
# pass, 1 when one fails (or the build does), 77 when the host checks pass
# but there is no CUDA driver or device. About a minute on an H200.
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
D=$(mktemp -d "${TMPDIR:-/tmp}/kvd-gpu.XXXXXX") || exit 1
KVD=
fails=0
passes=0

pass() { echo "PASS  $*"; passes=$((passes + 1)); }
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
# check, with the output kept in $D and shown only on a failure.
quiet() {
	name=$1; shift
	if "$@" >"$D/out.txt" 2>&1; then pass "$name"; else tail -20 "$D/out.txt"; fail "$name"; fi
}
cleanup() { [ -n "$KVD" ] && kill -9 "$KVD" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT INT TERM

kvctl() { timeout 10 "$BIN"/kvctl -a "$D/admin.sock" --json "$@"; }
json_int() { kvctl status | tr -d ' \n' | sed -n "s/.*\"$1\":\(-*[0-9]*\).*/\1/p"; }
status_has() { kvctl status | tr -d ' \n' | grep -q "\"$1\":\"$2\""; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }

start_kvd() {
	rm -f "$D/kvd.sock"
	"$BIN"/kvd -v --socket "$D/kvd.sock" --admin-socket "$D/admin.sock" "$@" \
		>>"$D/kvd.log" 2>&1 &
	KVD=$!
	for _ in $(seq 200); do
		[ -S "$D/kvd.sock" ] && return 0
		kill -0 "$KVD" 2>/dev/null || break
		sleep 0.1
	done
	tail -5 "$D/kvd.log"
	return 1
}

stop_kvd() {
	kvctl check >/dev/null || { echo "kvctl check failed"; return 1; }
	kill -TERM "$KVD" && wait "$KVD"
	rc=$?
	KVD=
	return $rc
}

if [ -f "$here/BUNDLE" ]; then
	B=$here
	echo "== bundle: $(head -1 "$B/BUNDLE"), $(sed -n 's/^commit: //p' "$B/BUNDLE")"
else
	cd "$here/../.." || exit 1
	O=${O:-build}
	echo "== build"
	if ! make -j"$(nproc)" O="$O" gpu-bundle >"$D/build.log" 2>&1; then
		tail -40 "$D/build.log"
		fail "build with CUDA"
		exit 1
	fi
	B=$(cd "$O/gpu-bundle" && pwd -P)
	pass "build with CUDA ($(command -v nvcc || echo /usr/local/cuda/bin/nvcc)), $O/gpu-bundle"
fi
BIN=$B/bin
T=$B/tests
cd "$D" || exit 1

echo "== host backend (no GPU needed)"
if start_kvd --backend host --pool-size 256M; then
	check "kvd --backend host starts, kvctl status" status_has backend host
	timeout 60 "$BIN"/kvbench -s "$D/kvd.sock" -p 2 -n 2000 >"$D/bench0.txt" 2>&1
	rc=$?
	grep -E "^ +(ops/s|pattern errors \(blocks\)) " "$D/bench0.txt" ||
		tail -5 "$D/bench0.txt"
	check "kvbench -p 2 -n 2000 on the host backend" test $rc -eq 0
	check "kvd (host) stops cleanly" stop_kvd
else
	fail "kvd --backend host starts"
fi
quiet "cuda backend, mocked driver (kvd side)" "$T"/test_cuda
quiet "cuda backend, mocked driver (library side)" "$T"/test_lib_cuda

"$T"/cuda_clients >"$D/probe.txt" 2>&1
if [ $? -eq 77 ]; then
	rt=$(sed -n 's/^cuda_clients: no CUDA device (\(.*\)), skipped/\1/p' "$D/probe.txt")
	# kvd says why: no libcuda.so.1, a driver older than 12.0, no device;
	# nothing if it starts (killed after 10 s): then the driver has a
	# device that the bundle's CUDA runtime cannot use.
	why=$(timeout 10 "$BIN"/kvd --backend cuda --pool-size 64M \
		--socket "$D/probe.sock" --admin-socket "$D/probe-admin.sock" 2>&1 |
		sed -n 's/.*--backend cuda: //p' | head -1)
	if [ -z "$why" ]; then
		fail "the CUDA runtime uses the device kvd found (it says: ${rt:-?})"
		echo "== $passes passed, $fails failed"
		exit 1
	fi
	echo "SKIP  GPU checks: no CUDA device here"
	echo "      kvd --backend cuda: $why"
	echo "      CUDA runtime: ${rt:-?}"
	echo "== $passes passed, $fails failed, GPU checks skipped"
	[ "$fails" -eq 0 ] || exit 1
	exit 77
fi
echo "== GPU: $(nvidia-smi -L 2>/dev/null | head -1)"
echo "== kernels against their C references"
"$T"/kernels_check >"$D/kernels.txt" 2>&1
rc=$?
grep -E "^FAIL|^  " "$D/kernels.txt" | head -40
tail -1 "$D/kernels.txt"
check "CUDA kernels match their C references ($(grep -c '^PASS' "$D/kernels.txt") case groups)" \
	test $rc -eq 0
echo "== decode bandwidth"
"$T"/decode_bench
check "decode_bench runs" test $? -eq 0

mem0=$(gpu_mem)
echo "== vmm export (kvd --backend auto), GPU memory used before: ${mem0:-?} MiB"
if start_kvd --backend auto --pool-size 8G; then
	check "--backend auto chose cuda" status_has backend cuda
	check "export is vmm" status_has export vmm
	status_has backend cuda || { tail -5 "$D/kvd.log"; exit 1; }
	timeout 120 "$T"/cuda_clients pair "$D/kvd.sock"
	check "two processes share blocks on the device (vmm)" test $? -eq 0
	echo "backed after the pair: $(json_int backed_bytes) bytes"
	timeout 180 "$BIN"/kvbench -s "$D/kvd.sock" -p 4 -n 4000 >"$D/bench.txt" 2>&1
	rc=$?
	grep -E "ops/s|ALLOC|RELEASE|GPU" "$D/bench.txt" | head -8
	check "kvbench -p 4 -n 4000 on the cuda backend" test $rc -eq 0
	timeout 180 "$BIN"/kvbench -s "$D/kvd.sock" -p 1 -n 20000 --batch 32 \
		--min-tokens 16 --max-tokens 16 >"$D/bench2.txt" 2>&1
	rc=$?
	grep -E "ops/s" "$D/bench2.txt" | head -3
	check "kvbench --batch 32 on the cuda backend" test $rc -eq 0
	b=1
	for _ in $(seq 40); do
		b=$(json_int backed_bytes)
		[ "$b" = 0 ] && break
		sleep 0.1
	done
	check "idle pool shrinks to 0 backed bytes (was it given back?)" test "$b" = 0
	check "kvd (vmm) stops cleanly" stop_kvd
	sleep 1
	mem1=$(gpu_mem)
	echo "GPU memory used after kvd stopped: ${mem1:-?} MiB"
	if [ -n "$mem0" ] && [ -n "$mem1" ]; then
		check "device memory given back on exit" test "$mem1" -le "$((mem0 + 512))"
	else
		echo "SKIP  device memory given back on exit (no nvidia-smi)"
	fi
else
	fail "kvd --backend auto starts on the GPU"
fi

echo "== legacy export"
if start_kvd --backend cuda --export legacy --pool-size 4G; then
	timeout 120 "$T"/cuda_clients pair "$D/kvd.sock"
	check "two processes share blocks on the device (legacy IPC)" test $? -eq 0
	timeout 120 "$BIN"/kvbench -s "$D/kvd.sock" -p 2 -n 1000 >"$D/bench3.txt" 2>&1
	check "kvbench on the legacy export" test $? -eq 0
	check "kvd (legacy) stops cleanly" stop_kvd
else
	fail "kvd --export legacy starts"
fi

echo "== host tier behind the device pool (pinned host memory)"
if start_kvd --backend cuda --pool-size 64M --host-tier-size 256M; then
	timeout 120 "$T"/cuda_clients tier "$D/kvd.sock"
	check "the host tier round trip on the device, every byte" test $? -eq 0
	p=$(kvctl tiers | tr -d ' \n' | sed -n 's/.*"promotions":\([0-9]*\).*/\1/p')
	check "kvctl tiers counts promotions (${p:-none})" test "${p:-0}" -gt 0
	check "kvd (host tier) stops cleanly" stop_kvd
else
	fail "kvd --backend cuda --host-tier-size starts"
fi

echo "== kvd restarted under a client"
if start_kvd --backend cuda --pool-size 4G; then
	timeout 120 "$T"/cuda_clients reconnect "$D/kvd.sock" "$D/flag" \
		>"$D/r.out" 2>&1 &
	R=$!
	for _ in $(seq 300); do grep -q READY "$D/r.out" && break; sleep 0.1; done
	kill -9 "$KVD"; wait "$KVD" 2>/dev/null; KVD=
	start_kvd --backend cuda --pool-size 4G && touch "$D/flag"
	wait $R
	rc=$?
	grep -E "^(PASS|FAIL)" "$D/r.out"
	check "client survives a kvd restart and remaps" test $rc -eq 0
	check "restarted kvd stops cleanly" stop_kvd
else
	fail "kvd --backend cuda starts"
fi

echo "== the Python package on the device (vllm_cuda.py)"
# the bundle's vendor/, else the developers' workspace beside the tree
V=$B/vendor
[ -d "$V" ] || V=${KVD_VLLM_VENDOR:-$here/../../../shared/vendor}
PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
	echo "SKIP  kvd Python package on the GPU: no python3"
elif start_kvd --backend cuda --pool-size 4G; then
	O=${O:-build} timeout 300 "$PY" "$T"/vllm_cuda.py "$D/kvd.sock" "$V" \
		>"$D/py.txt" 2>&1
	rc=$?
	grep -E "^(PASS|FAIL|SKIP)" "$D/py.txt"
	case $rc in
	0) pass "kvd Python package: cuda pool views and kvd.vllm's device copies" ;;
	77) ;;
	*) tail -20 "$D/py.txt"; fail "kvd Python package on the GPU (exit $rc)" ;;
	esac
	check "kvd (python checks) stops cleanly" stop_kvd
else
	fail "kvd --backend cuda starts (python checks)"
fi

echo "== $passes passed, $fails failed"
[ "$fails" -eq 0 ] || { echo "--- kvd log (tail)"; tail -30 "$D/kvd.log"; }
[ "$fails" -eq 0 ]
