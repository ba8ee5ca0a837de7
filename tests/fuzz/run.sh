#!/bin/sh
# SPDX-License-Identifier: MIT
# Run each libFuzzer target named on the command line for $FUZZ_SECONDS
# on its seeds (tests/fuzz/corpus/T/, read only; what it finds goes to
# $FUZZ_O/corpus/T/), then replay every input in tests/fuzz/regress/T/.
# One line per target; logs and crash inputs stay in $FUZZ_O/.
# Exits 1 if any target crashed, leaked, timed out or failed a replay.
set -u

O=${FUZZ_O:-build-fuzz}
SECS=${FUZZ_SECONDS:-30}
SRC=tests/fuzz
fail=0

# Scratch files of the targets (fuzz_trace's links) stay in $O/tmp.
rm -rf "$O/tmp"
mkdir -p "$O/tmp"
TMPDIR=$(cd "$O/tmp" && pwd)
export TMPDIR

# Why a libFuzzer run stopped, from its log.
verdict()
{
	if grep -q "ERROR: libFuzzer: timeout" "$1"; then
		echo timeout
	elif grep -q "ERROR: libFuzzer: out-of-memory" "$1"; then
		echo out-of-memory
	elif grep -q "ERROR: LeakSanitizer" "$1"; then
		echo leak
	else
		echo crash
	fi
}

# The first frames of the report, indented, for the summary.
report()
{
	grep -m 1 -E "FUZZ BUG|ERROR: |runtime error|invariant broken" "$1" |
		sed 's/^/        /'
	grep -E "^ +#[0-9]+ " "$1" |
		grep -v -E "fuzzer::|__sanitizer|libc\.so|fuzz_bug|abort|raise|pthread_kill| in main " |
		head -n 4 | sed 's/^ */        /'
}

for t in "$@"; do
	bin=$O/fuzz_$t
	work=$O/corpus/$t
	art=$O/artifacts/$t
	log=$O/log/$t.log
	mkdir -p "$work" "$art" "$O/log"
	dict=
	[ -f "$SRC/$t.dict" ] && dict=-dict=$SRC/$t.dict
	# shellcheck disable=SC2086
	UBSAN_OPTIONS=print_stacktrace=1 "$bin" -max_total_time="$SECS" \
		-print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix="$art/" $dict "$work" "$SRC/corpus/$t" \
		>"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" |
		tail -n 1)
	crashes=0
	if [ $rc -ne 0 ]; then
		crashes=1
		fail=1
	fi

	# Every saved reproducer must pass now.
	nreg=0
	rfail=0
	for f in "$SRC/regress/$t"/*; do
		[ -f "$f" ] || continue
		nreg=$((nreg + 1))
		if ! UBSAN_OPTIONS=print_stacktrace=1 "$bin" "$f" \
			>"$O/log/$t.regress.log" 2>&1; then
			rfail=$((rfail + 1))
			echo "  FUZZ    $t: regression $f fails:"
			report "$O/log/$t.regress.log"
		fi
	done
	[ $rfail -eq 0 ] || fail=1

	echo "  FUZZ    $t: execs=${execs:-0} crashes=$crashes" \
		"regress=$((nreg - rfail))/$nreg"
	if [ $crashes -ne 0 ]; then
		echo "        $(verdict "$log"), input in $art/ (log $log):"
		report "$log"
	fi
done
exit $fail
