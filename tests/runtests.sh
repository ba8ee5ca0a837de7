#!/bin/sh
# SPDX-License-Identifier: MIT
# Run every unit, integration and Python test with a timeout each; exit
# 0/1/77 per test (77 = skipped). The integration tests run twice: on kvd's
# default event loop, then on its epoll fallback (KVD_EVENT_LOOP=epoll,
# names suffixed " (epoll)"). Ends with "N passed, N failed, N skipped".
O=${O:-build}
TIMEOUT=${TEST_TIMEOUT:-120}
pass=0 fail=0 skip=0 failed=""

run() {
	name=$1
	log="$O/tests/$(echo "$name" | sed 's/ (\(.*\))$/.\1/').log"
	shift
	start=$(date +%s)
	timeout -k 5 "$TIMEOUT" "$@" >"$log" 2>&1
	rc=$?
	t=$(( $(date +%s) - start ))
	case $rc in
	0) pass=$((pass + 1)); printf '  PASS  %-40s %3ss\n' "$name" "$t" ;;
	77) skip=$((skip + 1)); printf '  SKIP  %-40s\n' "$name" ;;
	*) fail=$((fail + 1)); failed="$failed $name"
	   printf '  FAIL  %-40s (exit %s)\n' "$name" "$rc"
	   sed 's/^/        /' "$log" | tail -n 40 ;;
	esac
}

mkdir -p "$O/tests/unit" "$O/tests/integration"
for t in "$O"/tests/unit/test_*; do
	[ -x "$t" ] || continue
	case $t in *.o|*.log) continue ;; esac
	run "unit/$(basename "$t")" "$t"
done
# integration SUFFIX: every integration test, its name + SUFFIX.
integration() {
	for t in "$O"/tests/integration/*; do
		[ -x "$t" ] && [ -f "$t" ] || continue
		case $t in *.o|*.log) continue ;; esac
		run "integration/$(basename "$t")$1" "$t"
	done
	for t in tests/integration/*.sh; do
		[ -f "$t" ] || continue
		run "integration/$(basename "$t" .sh)$1" sh "$t" "$O"
	done
}
unset KVD_EVENT_LOOP
integration ""
# The Python package's tests (tests/python/): the binding, and the vLLM
# plug-in against the vendored vLLM; on kvd's default loop only.
PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || PYTHON=python3
mkdir -p "$O/tests/python"
# A sanitized build (make check): the interpreter is not, so the
# sanitizers' runtimes go first (LD_PRELOAD); Python's own allocations
# at exit are not leaks of ours.
preload=""
if readelf -d "$O/libkvclient.so" 2>/dev/null | grep -q 'NEEDED.*libasan'; then
	for rt in libasan.so libubsan.so; do
		f=$(${CC:-gcc} -print-file-name=$rt)
		[ -f "$f" ] && preload="$preload $f"
	done
fi
for t in tests/python/test_*.py; do
	[ -f "$t" ] || continue
	run "python/$(basename "$t" .py)" env O="$O" PYTHONDONTWRITEBYTECODE=1 \
		${preload:+LD_PRELOAD="${preload# }" ASAN_OPTIONS=detect_leaks=0} \
		"$PYTHON" "$t"
done
KVD_EVENT_LOOP=epoll
export KVD_EVENT_LOOP
integration " (epoll)"

[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
