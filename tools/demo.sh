#!/bin/sh
# SPDX-License-Identifier: MIT
# make demo: what kvd does, shown in under a minute and read in ten
# seconds. kvd on the host backend in a temporary directory; kvbench's 4
# engine processes load it, synchronous then batched; they replay the
# first requests of the Mooncake trace (the synthetic workload where
# ../shared/traces is missing) through the prefix cache with the
# allocator comparison; kvd's books are checked and kvd stopped. Then a
# second kvd with a 64 MiB pool and two models on it whose load
# alternates (kvbench --models 2), pages moving from the idle model to
# the busy one. One line per step, then a summary: what ran, what was
# shared, memory against static allocation, the two models, and the
# cleanup, each checked, not assumed. Every step's full report goes to
# BUILD_DIR/demo/demo.log (the JSON and kvd's log beside it);
# DEMO_VERBOSE=1 prints it here too.
# The last line is "demo: ok", or "demo: FAILED" (exit 1).
# usage: sh tools/demo.sh [BUILD_DIR]   (default build)
# DEMO_REQUESTS sets the requests per process (default 2000: a few
# seconds per run on two cores); DEMO_TRACE_LIMIT the requests replayed
# from the trace (default 2000: about 5 s); DEMO_MIX_LIMIT the requests
# each model replays in the mixed run (default 4000: about 5 s) and
# DEMO_PHASE_REQUESTS its turns (default 1000); DEMO_TRACE the trace;
# DEMO_OUT the folder of the log and reports (default BUILD_DIR/demo).
# DEMO_LIB=1 with `.` defines the functions and runs nothing (the tests).
BUILD=${1:-build}
REQUESTS=${DEMO_REQUESTS:-2000}
TRACE_LIMIT=${DEMO_TRACE_LIMIT:-2000}
MIX_LIMIT=${DEMO_MIX_LIMIT:-4000}
PHASE_REQUESTS=${DEMO_PHASE_REQUESTS:-1000}
PROCS=4
OUT=${DEMO_OUT:-$BUILD/demo}
case ${DEMO_VERBOSE:-0} in
0 | no | "") VERBOSE= ;;
*) VERBOSE=1 ;;
esac
LOG=$OUT/demo.log
KVD_PID=
DIR=
failed=0
# kvds started, and stopped with every cleanup check passed; what the
# checks found wrong, if anything
started=0
stopped=0
unclean=

# ---- figures for people, from kvbench's and kvctl's --json reports ----

# jget FILE PATH: the value at PATH (keys joined by dots, such as
# kvbench.results.hit_ratio_blocks) in a JSON report written one member
# a line, as kvbench and kvctl write them; nothing when absent.
jget() {
	[ -f "$1" ] || return 0
	awk -v want="$2" '
	{
		line = $0
		sub(/^[ \t]+/, "", line)
		sub(/,$/, "", line)
	}
	line ~ /^"[^"]*": (\{|\[)$/ {
		k = line
		sub(/^"/, "", k)
		sub(/".*/, "", k)
		path[++d] = k
		next
	}
	line ~ /^(\}|\])$/ { if (d > 0) d--; next }
	line ~ /^"[^"]*": / {
		k = line
		sub(/^"/, "", k)
		sub(/".*/, "", k)
		v = line
		sub(/^"[^"]*": /, "", v)
		gsub(/^"|"$/, "", v)
		p = ""
		for (i = 1; i <= d; i++)
			p = p path[i] "."
		if (p k == want) {
			print v
			exit
		}
	}' "$1"
}

# jval FILE PATH: jget's value, or "?" when the report lacks it.
jval() {
	v=$(jget "$1" "$2")
	echo "${v:-?}"
}

# jsum FILE KEY: the sum of KEY's numbers over the rows of a report's
# tables (one row a line); "?" when there is no report.
jsum() {
	[ -f "$1" ] || { echo "?"; return; }
	grep -o "\"$2\": [0-9]*" "$1" | awk '{ s += $2 } END { print s + 0 }'
}

# pct FRACTION: as a percentage with two or three significant digits,
# as kvbench's table prints them: 0.0269292 -> "2.69 %", 0.294 -> "29.4 %".
pct() {
	[ -n "$1" ] || { echo "?"; return; }
	awk -v f="$1" 'BEGIN {
		v = 100 * f
		a = v < 0 ? -v : v
		if (a >= 99.95)
			printf "%.0f %%\n", v
		else if (a >= 10)
			printf "%.1f %%\n", v
		else
			printf "%.2f %%\n", v
	}'
}

# mib BYTES: "11.9 MiB", "64 MiB".
mib() {
	[ -n "$1" ] || { echo "?"; return; }
	awk -v b="$1" 'BEGIN {
		v = b / 1048576
		if (v == int(v))
			printf "%d MiB\n", v
		else
			printf (v < 10 ? "%.2f MiB\n" : "%.1f MiB\n"), v
	}'
}

# num VALUE DECIMALS: VALUE rounded, "?" when missing.
num() {
	[ -n "$1" ] || { echo "?"; return; }
	awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f\n", d, v }'
}

# cores: this machine's online processors.
cores() {
	nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo "?"
}

# A step's one line: what it does, then (step_end) what it found.
step_begin() {
	if [ -n "$VERBOSE" ]; then
		printf '\n=== %s\n' "$1"
	else
		printf '  %-46s ' "$1"
	fi
	printf '\n=== %s\n' "$1" >>"$LOG"
}

step_end() {
	if [ -n "$VERBOSE" ]; then
		printf '  -> %s\n' "$1"
	else
		printf '%s\n' "$1"
	fi
}

# run_logged CMD...: CMD's output into the log (and, verbose, here too).
run_logged() {
	echo "\$ $*" >>"$LOG"
	"$@" >"$DIR/step.out" 2>&1
	rc=$?
	[ -z "$VERBOSE" ] || cat "$DIR/step.out"
	cat "$DIR/step.out" >>"$LOG"
	return $rc
}

fail() {
	printf 'demo: %s\n' "$*" >&2
	failed=1
}

show_log() {
	echo "--- kvd log ($OUT/kvd.log):" >&2
	tail -n 40 "$OUT/kvd.log" >&2
}

# die WHY: kvd could not be started; no step after it can run.
die() {
	printf 'demo: %s\n' "$*" >&2
	show_log
	echo "demo: FAILED" >&2
	exit 1
}

# bench NAME WHAT ARGS...: kvbench ARGS on the running kvd, its report in
# the log and its JSON in $OUT/NAME.json; fails the demo if it fails.
bench() {
	name=$1
	step_begin "$2"
	shift 2
	rm -f "$OUT/$name.json"
	if run_logged "$BUILD/kvbench" --socket "$SOCK" --json "$OUT/$name.json" "$@"; then
		return 0
	fi
	step_end "FAILED (kvbench exit $rc; see $LOG)"
	fail "kvbench failed (exit $rc): $*"
	tail -n 20 "$DIR/step.out" >&2
	return 1
}

# start_kvd NAME POOL SIZE: kvd with a pool of POOL (SIZE, for people)
# on $DIR/NAME.sock and $DIR/NAME-admin.sock.
start_kvd() {
	SOCK=$DIR/$1.sock
	ADMIN=$DIR/$1-admin.sock
	step_begin "kvd: host backend, $3 pool in RAM"
	echo "\$ $BUILD/kvd --backend host --pool-size $2 --socket $SOCK --admin-socket $ADMIN" >>"$LOG"
	"$BUILD/kvd" --backend host --pool-size "$2" --socket "$SOCK" \
		--admin-socket "$ADMIN" 2>>"$OUT/kvd.log" &
	KVD_PID=$!

	# Up to ~5 s for the admin socket, kvd's last step before serving.
	i=0
	while [ ! -S "$ADMIN" ]; do
		if ! kill -0 "$KVD_PID" 2>/dev/null; then
			wait "$KVD_PID"
			rc=$?
			KVD_PID=
			step_end "FAILED"
			die "kvd exited at start (exit $rc)"
		fi
		i=$((i + 1))
		if [ $i -gt 50 ]; then
			step_end "FAILED"
			die "kvd did not create $ADMIN within 5 s"
		fi
		sleep 0.1
	done
	started=$((started + 1))
	step_end "started, pid $KVD_PID"
}

# held_now: "CLIENTS BLOCKS" kvd has now: clients connected, blocks with
# a holder over all namespaces (kvctl status).
held_now() {
	"$BUILD/kvctl" --admin-socket "$ADMIN" --json status \
		>"$DIR/status.json" 2>>"$LOG" || { echo "? ?"; return; }
	echo "$(jget "$DIR/status.json" nr_clients) $(jsum "$DIR/status.json" blocks_used)"
}

# check_idle: kvd's books hold (kvctl check) and nothing is held: no
# client connected, no block with a holder (kvctl status; a client that
# just exited may take kvd a moment to see gone: up to ~2 s). 0 if so.
check_idle() {
	if ! run_logged "$BUILD/kvctl" --admin-socket "$ADMIN" check; then
		unclean="$unclean; kvctl check: kvd's books do not hold"
		return 1
	fi
	i=0
	while :; do
		# shellcheck disable=SC2046 # two words: clients, blocks
		set -- $(held_now)
		[ "$1" = 0 ] && [ "$2" = 0 ] && break
		i=$((i + 1))
		if [ $i -gt 20 ]; then
			unclean="$unclean; $1 clients and $2 blocks still held"
			return 1
		fi
		sleep 0.1
	done
	run_logged "$BUILD/kvctl" --admin-socket "$ADMIN" status
	return 0
}

# stop_kvd: check it is idle, SIGTERM it, wait; then its exit status is
# 0 and its sockets are gone. Non-zero when any of that is not so.
stop_kvd() {
	[ -n "$KVD_PID" ] || return 0
	step_begin "check kvd's books, stop kvd"
	ok=0
	if [ ! -x "$BUILD/kvctl" ]; then
		unclean="$unclean; $BUILD/kvctl not built: nothing checked"
		ok=1
	elif ! check_idle; then
		ok=1
	fi
	kill -TERM "$KVD_PID" 2>/dev/null
	wait "$KVD_PID"
	rc=$?
	KVD_PID=
	if [ $rc -ne 0 ]; then
		unclean="$unclean; kvd exit status $rc"
		ok=1
	fi
	for s in "$SOCK" "$ADMIN"; do
		if [ -e "$s" ]; then
			unclean="$unclean; kvd left $s behind"
			ok=1
		fi
	done
	if [ $ok -eq 0 ]; then
		stopped=$((stopped + 1))
		step_end "0 blocks held, stopped, sockets removed"
	else
		step_end "NOT CLEAN (${unclean#; })"
		fail "cleanup: ${unclean#; }"
		show_log
	fi
	return $ok
}

cleanup() {
	if [ -n "$KVD_PID" ]; then
		kill -TERM "$KVD_PID" 2>/dev/null
		wait "$KVD_PID" 2>/dev/null
	fi
	[ -n "$DIR" ] && rm -rf "$DIR"
}

# ---- the steps' one-line results ----

load_result() {
	f=$OUT/$1.json
	echo "$(num "$(jget "$f" kvbench.results.requests_per_s)" 0) requests/s," \
	     "$(num "$(jget "$f" kvbench.results.syscalls_per_op)" 2) syscalls per op"
}

replay_result() {
	f=$OUT/$1.json
	echo "hit ratio $(pct "$(jget "$f" kvbench.results.hit_ratio_blocks)")" \
	     "(bound $(pct "$(jget "$f" kvbench.results.bound_blocks)"))," \
	     "peak $(mib "$(jget "$f" kvbench.allocators.kvd_bytes)")"
}

mix_result() {
	f=$OUT/$1.json
	echo "$(jsum "$f" pages_out) pages moved," \
	     "hit ratio $(pct "$(jget "$f" kvbench.results.hit_ratio_blocks)")" \
	     "(bound $(pct "$(jget "$f" kvbench.results.bound_blocks)"))"
}

# ---- the summary ----

# summary DIR: the closing box, from the reports in DIR (load-sync,
# load-batch, replay and mix .json) and what stop_kvd found ($started,
# $stopped, $unclean); WORKLOAD names the replayed stream, CORES this
# machine's processors.
summary() {
	d=$1
	sync=$d/load-sync.json batch=$d/load-batch.json
	rep=$d/replay.json mix=$d/mix.json
	static=$(jget "$rep" kvbench.allocators.as_run.static_bytes)
	[ -n "$static" ] ||
		static=$(jget "$rep" kvbench.allocators.offline.static_bytes)
	errors="?"
	e1=$(jget "$sync" kvbench.results.pattern_errors)
	e2=$(jget "$batch" kvbench.results.pattern_errors)
	[ -n "$e1" ] && [ -n "$e2" ] && errors=$((e1 + e2))

	page="?"
	bytes=$(jget "$mix" kvbench.pool.pool_bytes)
	pages=$(jget "$mix" kvbench.pool.nr_pages)
	[ -n "$bytes" ] && [ -n "$pages" ] && [ "$pages" -gt 0 ] &&
		page=$(mib $((bytes / pages)))
	echo "== summary ====================================================================="
	echo "  ran:        kvd (host backend) and $PROCS engine processes:" \
	     "$((PROCS + 1)) processes on $CORES cores,"
	echo "              so the figures include waiting for a core"
	echo "  load:       2 x $(jval "$sync" kvbench.results.requests) requests:" \
	     "$(num "$(jget "$sync" kvbench.results.requests_per_s)" 0) requests/s" \
	     "one at a time, $(num "$(jget "$batch" kvbench.results.requests_per_s)" 0) batched;"
	echo "              every block's bytes written and read back:" \
	     "$errors errors"
	echo "  shared:     one prefix cache for all $PROCS processes: hit ratio" \
	     "$(pct "$(jget "$rep" kvbench.results.hit_ratio_blocks)") of prompt blocks;"
	echo "              bound $(pct "$(jget "$rep" kvbench.results.bound_blocks)")" \
	     "(the most any cache gets on these $WORKLOAD)"
	echo "  memory:     kvd's peak $(mib "$(jget "$rep" kvbench.allocators.kvd_bytes)");" \
	     "static allocation (max length per request)"
	echo "              needs $(mib "$static")," \
	     "$(num "$(jget "$rep" kvbench.allocators.static_vs_kvd)" 1)x as much"
	echo "  two models: one $(mib "$(jget "$mix" kvbench.pool.pool_bytes)") pool," \
	     "$(jval "$mix" kvbench.config.phases) turns: the idle model gave" \
	     "$(jsum "$mix" pages_out) pages ($page each)"
	echo "              to the busy one; hit ratio" \
	     "$(pct "$(jget "$mix" kvbench.results.hit_ratio_blocks)")," \
	     "bound $(pct "$(jget "$mix" kvbench.results.bound_blocks)")"
	if [ -z "$unclean" ] && [ "$stopped" -eq "$started" ]; then
		echo "  cleaned up: kvd stopped, 0 blocks held, sockets removed" \
		     "(checked, each of the $stopped kvds)"
	else
		echo "  cleaned up: NOT CLEAN: ${unclean#; }" \
		     "($stopped of $started kvds stopped clean)"
	fi
	echo "  details:    $LOG: every figure; kvd.log, the JSON reports beside it"
	echo "================================================================================"
}

main() {
	for bin in kvd kvbench; do
		if [ ! -x "$BUILD/$bin" ]; then
			echo "demo: $BUILD/$bin not found; run make first" >&2
			exit 1
		fi
	done
	TRACE=${DEMO_TRACE:-$(cd "$(dirname "$0")/.." && pwd)/../shared/traces/mooncake/conversation_trace.jsonl}
	CORES=$(cores)
	mkdir -p "$OUT" || exit 1
	: >"$LOG"
	: >"$OUT/kvd.log"
	DIR=$(mktemp -d "${TMPDIR:-/tmp}/kvd-demo.XXXXXX") || exit 1
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	echo "kvd demo: one kvd serves the KV-cache blocks of $PROCS engine" \
	     "processes (kvbench),"
	echo "all on this machine's $CORES cores. Every step's full report: $LOG"
	echo
	start_kvd kvd 1G "1 GiB"
	bench load-sync "load: $PROCS engines x $REQUESTS requests, 1 at a time" \
		-p $PROCS -n "$REQUESTS" &&
		step_end "$(load_result load-sync)"
	bench load-batch "load: the same, 16 requests per batch" \
		-p $PROCS -n "$REQUESTS" --batch 16 &&
		step_end "$(load_result load-batch)"

	# 256-byte blocks, so that every block the replay commits fits the
	# pool: the hit ratio then meets the infinite-cache bound.
	if [ -f "$TRACE" ]; then
		WORKLOAD="$TRACE_LIMIT Mooncake trace requests"
		set -- --trace "$TRACE" --model demo-mooncake
	else
		WORKLOAD="$TRACE_LIMIT synthetic chat requests"
		echo "  (no trace at $TRACE: the synthetic workload instead)"
		set -- --synthetic --model demo-synthetic

	fi
	bench replay "prefix cache: $WORKLOAD" -p $PROCS --limit "$TRACE_LIMIT" \
		--layers 1 --kv-heads 1 --head-dim 4 --compare-allocators "$@" &&
		step_end "$(replay_result replay)"
	stop_kvd

	# Two models on a pool that cannot hold both caches: model 0 (1
	# layer) and model 1 (2 layers) take turns, and the busy one takes
	# the idle one's pages. Blocks of 1 and 2 KiB keep a request small
	# next to a 2 MiB page.
	start_kvd mix 64M "64 MiB"
	bench mix "two models taking turns on that pool" \
		--admin-socket "$ADMIN" -p $PROCS --synthetic --models 2 \
		--limit "$MIX_LIMIT" --phase-requests "$PHASE_REQUESTS" \
		--layers 1 --kv-heads 1 --head-dim 16 --model demo-mix &&
		step_end "$(mix_result mix)"
	stop_kvd

	echo
	summary "$OUT"
	if [ $failed -ne 0 ]; then
		echo "demo: FAILED" >&2
		exit 1
	fi
	echo "demo: ok"
}

[ -n "$DEMO_LIB" ] || main
