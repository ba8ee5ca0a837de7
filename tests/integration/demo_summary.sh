#!/bin/sh
# SPDX-License-Identifier: MIT
# make demo reads as a demonstration: a short real run of tools/demo.sh
# (few requests) prints one line per step and a closing summary (what
# ran, what was shared, memory against static allocation, the two
# models, the cleanup, checked), percentages as percentages, no
# figure with six digits, and ends "demo: ok"; kvd is gone after it.
# Its log keeps every figure, with kvbench's table labels fixed (a
# column of ratios named "hit ratio (blocks)", units on figures), while
# the JSON reports keep their fields. Then the script's own functions
# (DEMO_LIB=1): the percent format, and a summary over reports that say
# the cleanup failed, or that are missing, never claiming what it did
# not see. Exit 0 pass, 1 fail.
# usage: sh tests/integration/demo_summary.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEMO=$ROOT/tools/demo.sh
TDIR=

fail() {
	echo "FAIL: $*" >&2
	if [ -n "$TDIR" ] && [ -s "$TDIR/out" ]; then
		echo "--- demo output:" >&2
		cat "$TDIR/out" >&2
	fi
	exit 1
}

cleanup() {
	[ -n "$TDIR" ] && rm -rf "$TDIR"
}

for bin in kvd kvbench kvctl; do
	[ -x "$BUILD/$bin" ] || fail "$BUILD/$bin not built"
done
TDIR=$(mktemp -d "${TMPDIR:-/tmp}/kvd-demo-test.XXXXXX") || exit 1
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# has PATTERN WHAT: the demo's output has a line matching PATTERN (ERE).
has() {
	grep -Eq -- "$1" "$TDIR/out" || fail "no $2 in the demo's output (/$1/)"
}

# ---- a short real run ----

DEMO_OUT=$TDIR/demo DEMO_REQUESTS=100 DEMO_TRACE_LIMIT=200 \
	DEMO_MIX_LIMIT=400 DEMO_PHASE_REQUESTS=100 \
	timeout -k 5 100 sh "$DEMO" "$BUILD" >"$TDIR/out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "the demo's exit status is $rc"
[ "$(tail -n 1 "$TDIR/out")" = "demo: ok" ] || fail "the last line is not 'demo: ok'"
lines=$(wc -l <"$TDIR/out")
[ "$lines" -le 40 ] || fail "$lines lines of output; a demonstration fits in 40"

has '^== summary ' "summary box"
has '^  ran: .*[0-9]+ engine processes: [0-9]+ processes on [0-9?]+ cores' \
	"what ran (processes against cores)"
has '^  shared: .*hit ratio [0-9]+(\.[0-9]+)? % of prompt blocks' \
	"hit ratio as a percentage"
has '^ +bound [0-9]+(\.[0-9]+)? % \(the most any cache gets' \
	"hit ratio's bound, explained"
has '^  memory: +kvd.s peak [0-9.]+ MiB; static allocation' \
	"memory against static allocation"
has '^ +needs [0-9.]+ MiB, [0-9.]+x as much' "static allocation's size"
has '^  two models: one 64 MiB pool' "two models on one pool"
has '^  cleaned up: kvd stopped, 0 blocks held, sockets removed' "cleanup line"
has "^  details: +$TDIR/demo/demo.log" "pointer to the full log"
if grep -En '[0-9]\.[0-9]{5,}|\(%\)' "$TDIR/out"; then
	fail "a figure printed with six digits, or a '(%)' label, above"
fi
if grep -n '\?' "$TDIR/out" | grep -v '^[0-9]*:  (no trace'; then
	fail "a figure missing ('?') above"
fi

# Every kvd the demo started is gone.
sed -n 's/.*started, pid \([0-9]*\)$/\1/p' "$TDIR/out" | while read -r pid; do
	if kill -0 "$pid" 2>/dev/null; then
		fail "kvd $pid still runs"
	fi
done || exit 1
[ "$(grep -c 'started, pid' "$TDIR/out")" -eq 2 ] || fail "not 2 kvds started"

# The log: kvbench's tables in full, labelled; the JSON as it was.
log=$TDIR/demo/demo.log
grep -Eq 'req/s +hit ratio \(blocks\) +(pool +host tier +(disk tier +)?)?open' "$log" ||
	fail "no 'hit ratio (blocks)' column in the log"
grep -Eq '^ +waste at peak +[0-9]+(\.[0-9]+)? %$' "$log" ||
	fail "waste at peak not a percentage in the log"
grep -Eq '^ +kvd / ideal sharing +[0-9.]+x +\(ideal: ' "$log" ||
	fail "kvd / ideal sharing not explained in the log"
if grep -n 'hit blocks  *open' "$log"; then
	fail "a column of ratios still named 'hit blocks'"
fi
for key in waste_at_peak_pct hit_ratio_blocks bound_blocks kvd_vs_ideal \
	   static_vs_kvd peak_pct kvd_bytes; do
	grep -Eq "\"$key\": [0-9][0-9.e+-]*,?$" "$TDIR/demo/replay.json" ||
		fail "replay.json: $key is not a plain number"
done
grep -Eq '"hit_ratio_blocks": [0-9.]+,' "$TDIR/demo/mix.json" ||
	fail "mix.json: the rows lost hit_ratio_blocks"

# ---- the script's functions ----

# shellcheck disable=SC1090,SC2034 # the sourced script reads these
(
	DEMO_LIB=1
	. "$DEMO"
	command -v pct >/dev/null 2>&1 || { echo "FAIL: demo.sh defines no pct" >&2; exit 1; }
	for c in "0.0269292 2.69 %" "0.294108 29.4 %" "1 100 %" "0 0.00 %" \
		 "0.000287 0.03 %"; do
		# shellcheck disable=SC2086 # two words: fraction, percent
		set -- $c
		got=$(pct "$1")
		[ "$got" = "$2 %" ] || { echo "FAIL: pct $1: '$got', not '$2 %'" >&2; exit 1; }
	done
	[ "$(mib 67108864)" = "64 MiB" ] || { echo "FAIL: mib 64M: $(mib 67108864)" >&2; exit 1; }
	[ "$(jget "$TDIR/demo/replay.json" kvbench.bound.refs)" -gt 0 ] ||
		{ echo "FAIL: jget kvbench.bound.refs" >&2; exit 1; }

	# A failed cleanup, and a missing report, are said as such.
	PROCS=4 CORES=2 WORKLOAD=test started=2 stopped=1
	unclean="; kvd exit status 1"
	rm -f "$TDIR/demo/mix.json"
	summary "$TDIR/demo" >"$TDIR/sum" || exit 1
	grep -q '^  cleaned up: NOT CLEAN: kvd exit status 1 (1 of 2 kvds' "$TDIR/sum" ||
		{ echo "FAIL: a failed cleanup not said" >&2; cat "$TDIR/sum" >&2; exit 1; }
	grep -q 'gave ? pages' "$TDIR/sum" ||
		{ echo "FAIL: a missing report's figure not '?'" >&2; cat "$TDIR/sum" >&2; exit 1; }
	if grep -q 'sockets removed' "$TDIR/sum"; then
		echo "FAIL: the summary claims a cleanup it did not see" >&2
		exit 1
	fi
) || exit 1

echo "PASS"
