#!/bin/sh
# SPDX-License-Identifier: MIT
# kvbench --policy all --quick against a kvd of our own: none and
# truncate stop every sequence at max_context (none with -E2BIG), a
# window of W keeps at most ceil((W - 1) / block_tokens) + 1 blocks per
# sequence and stops committing at its first drop, and the pool's peak
# under window and sinks is far below none's. Then a short synthetic
# replay: the token-granular bound is at least the block-granular one.
# Speed is reported, never checked. Exit 0 pass, 1 fail, 77 skip (no jq).
# usage: sh tests/integration/kvbench_policy.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/integration/kvd_test.shlib"

command -v jq >/dev/null 2>&1 || skip "jq not installed"
for bin in kvd kvbench kvctl; do
	[ -x "$BUILD/$bin" ] || fail "$BUILD/$bin not built"
done

test_dir policy
start_kvd kvd 64M --config /dev/null

# bench OUT ARGS...: kvbench --json OUT, quiet; fails the test if it fails.
bench() {
	out=$1
	shift
	echo "kvbench $*"
	timeout -k 5 90 "$BUILD/kvbench" --socket "$SOCK" -q --json "$out" "$@"
	rc=$?
	[ $rc -eq 0 ] || fail "kvbench $* exit status $rc"
	[ -s "$out" ] || fail "kvbench wrote no $out"
}

# check OUT WHAT FILTER: FILTER holds on OUT, else the test fails.
check() {
	jq -e "$3" "$1" >/dev/null || fail "$2"
}

P=$DIR/policy.json
bench "$P" --policy all --quick
jq -r '.policies[] | "  \(.policy): tokens \(.tokens_min)..\(.tokens_max), E2BIG \(.e2big), kept \(.peak_kept_blocks) of \(.kept_bound) blocks, pool peak \(.pool_peak_blocks) (\(.pool_vs_none) x none), \(.block_ops_per_s) block ops/s"' "$P"

check "$P" "the run did not end ok" '.kvbench.result == "ok" and
	([.policies[].status] | all(. == "ok")) and
	([.policies[].policy] == ["none", "truncate stop", "window 128",
				  "sinks 4 128"])'
# --quick: 2 processes x 2 sequences, max_context 512, 64 + 4096 tokens
check "$P" "none did not stop every sequence at max_context with E2BIG" '
	.kvbench.config.ns_max_context as $mc |
	.policies[] | select(.policy == "none") |
	$mc == 512 and .tokens_min == $mc and .tokens_max == $mc and
	.e2big == 4'
check "$P" "truncate (stop) did not stop every sequence at max_context" '
	.kvbench.config.ns_max_context as $mc |
	.policies[] | select(.policy == "truncate stop") |
	.tokens_min == $mc and .tokens_max == $mc'
check "$P" "window kept more than ceil((W - 1) / block_tokens) + 1 blocks" '
	.kvbench.config.block_tokens as $bt |
	.policies[] | select(.policy | startswith("window ")) |
	(.policy | split(" ")[1] | tonumber) as $w |
	.tokens_min == 64 + 4096 and
	.peak_kept_blocks <= ((($w - 1 + $bt - 1) / $bt) | floor) + 1 and
	.peak_kept_blocks <= .kept_bound'
check "$P" "window and sinks: the pool peak is not far below none's" '
	(.policies[] | select(.policy == "none") | .pool_peak_blocks) as $n |
	$n >= 4 * 512 / 16 and
	([.policies[] | select(.policy | test("^(window|sinks) ")) |
	  .pool_peak_blocks * 2 < $n] | all)'
check "$P" "window: commit_end moved after the first drop" '
	[.seqs[] | select(.policy | startswith("window ")) |
	 .dropped > 0 and .first_drop_len > 0 and
	 .commit_end == .commit_end_at_drop] | all'

S=$DIR/syn.json
bench "$S" --synthetic --limit 400 -p 2 --layers 1 --kv-heads 1 \
	--head-dim 4
jq -r '.kvbench.results | "  synthetic: bound \(.bound_tokens) (blocks, in tokens), token bound \(.token_bound_tokens), hit \(.hit_ratio_tokens)"' "$S"
check "$S" "the token bound is below the block bound" '
	.kvbench.result == "ok" and
	.kvbench.results.bound_tokens > 0 and
	.kvbench.results.token_bound_tokens >= .kvbench.results.bound_tokens'

stop_kvd
echo "PASS"
