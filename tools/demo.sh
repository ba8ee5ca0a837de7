#!/bin/sh
# SPDX-License-Identifier: MIT
# kvd on the host backend in a temporary directory, then kvbench with 4
# engine processes, synchronous and batched, then a replay of the first
# requests of the Mooncake trace through the prefix cache with the
# allocator comparison (when ../shared/traces is there), then kvctl
# status if built. Then a second kvd with a 64 MiB pool, and two models
# on it whose load alternates (kvbench --models 2): the time series
# shows pages moving from one namespace to the other at each turn.
# usage: sh tools/demo.sh [BUILD_DIR]   (default build)
# DEMO_REQUESTS sets the requests per process (default 2000: a few
# seconds per run on two cores); DEMO_TRACE_LIMIT the requests replayed
# from the trace (default 2000: about 5 s); DEMO_MIX_LIMIT the requests
# each model replays in the mixed run (default 4000: about 5 s).
BUILD=${1:-build}
REQUESTS=${DEMO_REQUESTS:-2000}
TRACE_LIMIT=${DEMO_TRACE_LIMIT:-2000}
MIX_LIMIT=${DEMO_MIX_LIMIT:-4000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRACE=$ROOT/../shared/traces/mooncake/conversation_trace.jsonl
KVD_PID=
failed=0

say() {
	printf '\n=== %s\n' "$*"
}

fail() {
	printf 'demo: %s\n' "$*" >&2
	failed=1
}

show_log() {
	echo "--- kvd log ($DIR/kvd.log):" >&2
	cat "$DIR/kvd.log" >&2
}

# SIGTERM kvd and wait for it; non-zero when it did not stop cleanly.
stop_kvd() {
	[ -n "$KVD_PID" ] || return 0
	kill -TERM "$KVD_PID" 2>/dev/null
	wait "$KVD_PID"
	rc=$?
	KVD_PID=
	return $rc
}

cleanup() {
	if [ -n "$KVD_PID" ]; then
		kill -TERM "$KVD_PID" 2>/dev/null
		wait "$KVD_PID" 2>/dev/null
	fi
	[ -n "$DIR" ] && rm -rf "$DIR"
}

# Each step runs under its own name; a failure is noted, the demo goes on.
step() {
	say "$*"
	"$@" || fail "failed (exit $?): $*"
}

for bin in kvd kvbench; do
	if [ ! -x "$BUILD/$bin" ]; then
		echo "demo: $BUILD/$bin not found; run make first" >&2
		exit 1
	fi
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/kvd-demo.XXXXXX") || exit 1
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_kvd NAME POOL: kvd on $DIR/NAME.sock and $DIR/NAME-admin.sock.
start_kvd() {
	SOCK=$DIR/$1.sock
	ADMIN=$DIR/$1-admin.sock
	say "kvd --backend host --pool-size $2 (sockets in $DIR)"
	"$BUILD/kvd" --backend host --pool-size "$2" --socket "$SOCK" \
		--admin-socket "$ADMIN" 2>>"$DIR/kvd.log" &
	KVD_PID=$!

	# Up to ~5 s for the admin socket, kvd's last step before serving.
	i=0
	while [ ! -S "$ADMIN" ]; do
		if ! kill -0 "$KVD_PID" 2>/dev/null; then
			wait "$KVD_PID"
			echo "demo: kvd exited at start (exit $?)" >&2
			KVD_PID=
			show_log
			exit 1
		fi
		i=$((i + 1))
		if [ $i -gt 50 ]; then
			echo "demo: kvd did not create $ADMIN within 5 s" >&2
			show_log
			exit 1
		fi
		sleep 0.1
	done
	echo "kvd running, pid $KVD_PID"
}

start_kvd kvd 1G

step "$BUILD/kvbench" --socket "$SOCK" -p 4 -n "$REQUESTS"
step "$BUILD/kvbench" --socket "$SOCK" -p 4 -n "$REQUESTS" --batch 16

# 256-byte blocks, so that every block the replay commits fits the pool:
# the hit ratio then meets the infinite-cache bound.
if [ -f "$TRACE" ]; then
	step "$BUILD/kvbench" --socket "$SOCK" -p 4 --trace "$TRACE" \
		--limit "$TRACE_LIMIT" --layers 1 --kv-heads 1 --head-dim 4 \
		--model demo-mooncake --compare-allocators
else
	say "trace replay: skipped ($TRACE not found)"
fi

if [ -x "$BUILD/kvctl" ]; then
	step "$BUILD/kvctl" --admin-socket "$ADMIN" status
else
	say "kvctl status: skipped ($BUILD/kvctl not built)"
fi

say "stopping kvd"
if ! stop_kvd; then
	fail "kvd did not stop cleanly"
	show_log
fi

# Two models on a pool that cannot hold both caches: model 0 (1 layer)
# and model 1 (2 layers) take turns of 1000 requests, and the busy one
# takes the idle one's pages. Blocks of 1 and 2 KiB keep a request small
# next to a 2 MiB page.
start_kvd mix 64M
step "$BUILD/kvbench" --socket "$SOCK" --admin-socket "$ADMIN" -p 4 \
	--synthetic --models 2 --limit "$MIX_LIMIT" --phase-requests 1000 \
	--layers 1 --kv-heads 1 --head-dim 16 --model demo-mix
say "stopping kvd"
if ! stop_kvd; then
	fail "kvd did not stop cleanly"
	show_log
fi

if [ $failed -ne 0 ]; then
	echo "demo: FAILED" >&2
	exit 1
fi
echo "demo: ok"
