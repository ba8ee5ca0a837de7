#!/bin/sh
# SPDX-License-Identifier: MIT
# make valgrind: integration tests with the test program (the clients,
# forked children too) and kvd (through the harness' KVD_TEST_WRAPPER)
# under valgrind memcheck. A memcheck error or definite leak in either
# fails the test; kvd's report is in its log, which the harness prints
# when kvd exits non-zero. Usage: valgrind.sh TEST... (names in
# $O/tests/integration); $VALGRIND is the memcheck command line.
O=${O:-build-valgrind}
VALGRIND=${VALGRIND:-valgrind -q --error-exitcode=1 --leak-check=full}
TIMEOUT=${TEST_TIMEOUT:-600}
LOGS=$O/tests/valgrind
pass=0 fail=0 skip=0 failed=""

mkdir -p "$LOGS"
for name in "$@"; do
	t=$O/tests/integration/$name
	start=$(date +%s)
	# jemalloc's malloc in kvd is replaced by memcheck's as libc's is
	KVD_TEST_WRAPPER="$VALGRIND --soname-synonyms=somalloc=*jemalloc*" \
	TEST_VALGRIND=1 timeout -k 5 "$TIMEOUT" $VALGRIND "$t" \
		>"$LOGS/$name.log" 2>&1
	rc=$?
	secs=$(( $(date +%s) - start ))
	case $rc in
	0) pass=$((pass + 1)); printf '  PASS  %-24s %4ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf '  SKIP  %-24s\n' "$name" ;;
	*) fail=$((fail + 1)); failed="$failed $name"
	   printf '  FAIL  %-24s (exit %s)\n' "$name" "$rc"
	   tail -n 40 "$LOGS/$name.log" | sed 's/^/        /' ;;
	esac
done
[ -n "$failed" ] && echo "failed:$failed"
echo "valgrind: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
