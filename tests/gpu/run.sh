#!/bin/sh
# SPDX-License-Identifier: MIT
# Every GPU-side check, for a machine with a CUDA device: build, then
#   - the kernels (copy_blocks, reshape_and_cache, paged_attention_decode)
#     against their C references (tests/gpu/kernels_check),
#   - the decode kernel's memory bandwidth table (tests/gpu/decode_bench),
#   - the cuda backend's mocked-driver unit tests,
#   - kvd --backend auto choosing cuda,
#   - two engine processes writing blocks on the device and reading each
#     other's committed blocks, COW on the device (vmm and legacy exports),
#   - kvbench on the cuda backend, the pool shrinking back when idle,
#   - kvd killed and restarted under a client, which reconnects,
#   - device memory given back when kvd stops.
# Prints PASS/FAIL per check and a summary; about a minute on an H200.
set -u
cd "$(dirname "$0")/../.."
O=${O:-build}
D=$(mktemp -d /tmp/kvd-gpu.XXXXXX)
KVD=
fails=0
passes=0

pass() { echo "PASS  $*"; passes=$((passes + 1)); }
fail() { echo "FAIL  $*"; fails=$((fails + 1)); }
check() { name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
cleanup() { [ -n "$KVD" ] && kill -9 "$KVD" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT INT TERM

kvctl() { timeout 10 "$O"/kvctl -a "$D/admin.sock" --json "$@"; }
json_int() { kvctl status | tr -d ' \n' | sed -n "s/.*\"$1\":\(-*[0-9]*\).*/\1/p"; }
status_has() { kvctl status | tr -d ' \n' | grep -q "\"$1\":\"$2\""; }
gpu_mem() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1; }

start_kvd() {
	rm -f "$D/kvd.sock"
	"$O"/kvd -v --socket "$D/kvd.sock" --admin-socket "$D/admin.sock" "$@" \
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

echo "== GPU: $(nvidia-smi -L 2>/dev/null | head -1)"
echo "== build"
if ! make -j"$(nproc)" deps all kernels "$O"/tests/unit/test_cuda \
	"$O"/tests/unit/test_lib_cuda >"$D/build.log" 2>&1; then
	tail -40 "$D/build.log"
	fail "build with CUDA"
	exit 1
fi
pass "build with CUDA ($(command -v nvcc || echo /usr/local/cuda/bin/nvcc))"

"$O"/tests/gpu/cuda_clients >/dev/null 2>&1
if [ $? -eq 77 ]; then
	echo "SKIP  no CUDA device here: the GPU checks need one"
	exit 77
fi
echo "== kernels against their C references"
"$O"/tests/gpu/kernels_check >"$D/kernels.txt" 2>&1
rc=$?
grep -E "^FAIL|^  " "$D/kernels.txt" | head -40
tail -1 "$D/kernels.txt"
check "CUDA kernels match their C references ($(grep -c '^PASS' "$D/kernels.txt") case groups)" \
	test $rc -eq 0
echo "== decode bandwidth"
"$O"/tests/gpu/decode_bench
check "decode_bench runs" test $? -eq 0
check "cuda backend, mocked driver (kvd side)" "$O"/tests/unit/test_cuda
check "cuda backend, mocked driver (library side)" "$O"/tests/unit/test_lib_cuda

mem0=$(gpu_mem)
echo "== vmm export (kvd --backend auto), GPU memory used before: ${mem0:-?} MiB"
if start_kvd --backend auto --pool-size 8G; then
	check "--backend auto chose cuda" status_has backend cuda
	check "export is vmm" status_has export vmm
	status_has backend cuda || { tail -5 "$D/kvd.log"; exit 1; }
	timeout 120 "$O"/tests/gpu/cuda_clients pair "$D/kvd.sock"
	check "two processes share blocks on the device (vmm)" test $? -eq 0
	echo "backed after the pair: $(json_int backed_bytes) bytes"
	timeout 180 "$O"/kvbench -s "$D/kvd.sock" -p 4 -n 4000 >"$D/bench.txt" 2>&1
	rc=$?
	grep -E "ops/s|ALLOC|RELEASE|GPU" "$D/bench.txt" | head -8
	check "kvbench -p 4 -n 4000 on the cuda backend" test $rc -eq 0
	timeout 180 "$O"/kvbench -s "$D/kvd.sock" -p 1 -n 20000 --batch 32 \
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
	timeout 120 "$O"/tests/gpu/cuda_clients pair "$D/kvd.sock"
	check "two processes share blocks on the device (legacy IPC)" test $? -eq 0
	timeout 120 "$O"/kvbench -s "$D/kvd.sock" -p 2 -n 1000 >"$D/bench3.txt" 2>&1
	check "kvbench on the legacy export" test $? -eq 0
	check "kvd (legacy) stops cleanly" stop_kvd
else
	fail "kvd --export legacy starts"
fi

echo "== kvd restarted under a client"
if start_kvd --backend cuda --pool-size 4G; then
	timeout 120 "$O"/tests/gpu/cuda_clients reconnect "$D/kvd.sock" "$D/flag" \
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

echo "== $passes passed, $fails failed"
[ "$fails" -eq 0 ] || { echo "--- kvd log (tail)"; tail -30 "$D/kvd.log"; }
[ "$fails" -eq 0 ]
