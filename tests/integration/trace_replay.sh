#!/bin/sh
# SPDX-License-Identifier: MIT
# Trace replay: kvbench replays the first 2000 requests of the Mooncake
# conversation trace over 4 engine processes. With a pool large enough
# the prefix hit ratio is within 0.01 of kvbench's own infinite-cache
# bound and kvd evicts nothing; with a small pool the ratio is lower and
# kvd evicts. A short synthetic replay checks the token-hashing path the
# same way. With a host tier behind a small pool (--compare-tier, on
# kvbench's private kvds) the synthetic replay reaches the bound again,
# its hits split between pool and tier, where the pool alone falls
# short. With a few MiB of disk tier below a host tier too small for
# the stream (--disk-tier-size, the file in the test's temp dir) the
# replay reaches the bound with hits from the disk, its promotion pass
# reads the disk back, and no file is left behind; a file at
# --disk-tier-path that is not kvd's is refused and left as it was.
# Exit 0 pass, 1 fail, 77 skip (no trace, no jq).
# usage: sh tests/integration/trace_replay.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TRACE=${TRACE_REPLAY_TRACE:-$ROOT/../shared/traces/mooncake/conversation_trace.jsonl}
LIMIT=${TRACE_REPLAY_LIMIT:-2000}
TOL=0.01
# 256-byte blocks of 16 tokens: the 2000 requests commit ~1.25M blocks.
GEOM="--layers 1 --kv-heads 1 --head-dim 4 --block-tokens 16"
BIG_POOL=512M		# 2M blocks: room for every block, no eviction
SMALL_POOL=16M		# 64k blocks: a few dozen long requests
. "$ROOT/tests/integration/kvd_test.shlib"

[ -f "$TRACE" ] || skip "no trace at $TRACE"
command -v jq >/dev/null 2>&1 || skip "jq not installed"
for bin in kvd kvbench; do
	[ -x "$BUILD/$bin" ] || fail "$BUILD/$bin not built"
done

test_dir trace

# bench OUT ARGS...: kvbench --json OUT, quiet; fails the test if it fails.
bench() {
	out=$1
	shift
	echo "kvbench $*"
	# shellcheck disable=SC2086 # GEOM is several words
	if command -v timeout >/dev/null 2>&1; then
		timeout -k 5 90 "$BUILD/kvbench" --socket "$SOCK" $GEOM -q \
			--json "$out" "$@"
	else
		"$BUILD/kvbench" --socket "$SOCK" $GEOM -q --json "$out" "$@"
	fi
	rc=$?
	[ $rc -eq 0 ] || fail "kvbench exit status $rc"
	[ -s "$out" ] || fail "kvbench wrote no $out"
}

# show OUT: the figures, for the log.
show() {
	jq -r '.kvbench.results | "  hit ratio \(.hit_ratio_blocks) (blocks), \(.hit_ratio_tokens) (tokens); bound \(.bound_blocks), \(.bound_tokens); evictions \(.evictions), forced \(.forced), preempted \(.preempted), \(.requests_per_s) requests/s"' "$1"
}

# near OUT: ran fine, and the hit ratio is within TOL of the bound.
near() {
	jq -e --argjson tol "$TOL" --argjson n "$2" '
		.kvbench.result == "ok" and
		.kvbench.results.requests == $n and
		.kvbench.results.stamp_errors == 0 and
		((.kvbench.results.hit_ratio_blocks -
		  .kvbench.results.bound_blocks) | . <= $tol and . >= -$tol) and
		((.kvbench.results.hit_ratio_tokens -
		  .kvbench.results.bound_tokens) | . <= $tol and . >= -$tol)
	' "$1" >/dev/null
}

start_kvd big "$BIG_POOL"

bench "$DIR/syn.json" --synthetic --limit 1000 -p 2 --model kvbench-syn
show "$DIR/syn.json"
near "$DIR/syn.json" 1000 || fail "synthetic: hit ratio not within $TOL of the bound"

bench "$DIR/big.json" --trace "$TRACE" --limit "$LIMIT" -p 4
show "$DIR/big.json"
near "$DIR/big.json" "$LIMIT" ||
	fail "pool $BIG_POOL: hit ratio not within $TOL of the infinite-cache bound"
jq -e '.kvbench.results.evictions == 0' "$DIR/big.json" >/dev/null ||
	fail "pool $BIG_POOL: kvd evicted blocks although the pool has room"
stop_kvd

start_kvd small "$SMALL_POOL"
bench "$DIR/small.json" --trace "$TRACE" --limit "$LIMIT" -p 4
show "$DIR/small.json"
jq -e --slurpfile big "$DIR/big.json" '
	.kvbench.result == "ok" and
	.kvbench.results.stamp_errors == 0 and
	.kvbench.results.evictions > 0 and
	.kvbench.results.hit_ratio_blocks <
		$big[0].kvbench.results.hit_ratio_blocks - 0.05
' "$DIR/small.json" >/dev/null ||
	fail "pool $SMALL_POOL: expected evictions and a hit ratio well below the large pool's"
stop_kvd

# A 2 MiB pool (8192 blocks) for ~33k committed blocks, a tier for all.
echo "kvbench --private-kvd=2M --host-tier-size 64M --compare-tier --synthetic"
to=
command -v timeout >/dev/null 2>&1 && to="timeout -k 5 90"
# shellcheck disable=SC2086 # GEOM and to are several words
$to "$BUILD/kvbench" --private-kvd=2M --kvd "$BUILD/kvd" \
	--host-tier-size 64M --compare-tier $GEOM -q --json "$DIR/tier.json" \
	--synthetic --limit 1000 -p 2 --model kvbench-tier ||
	fail "kvbench --compare-tier exit status $?"
jq -r '.kvbench.tier_compare | "  pool only \(.pool_only_hit_ratio), with tier \(.tier_hit_ratio) (pool \(.tier_hit_ratio_pool), tier \(.tier_hit_ratio_host)); bound \(.bound)"' "$DIR/tier.json"
jq -e --argjson tol "$TOL" '
	.kvbench.result == "ok" and
	.kvbench.results.stamp_errors == 0 and
	.kvbench.results.pool_hit_blocks + .kvbench.results.host_hit_blocks ==
		.kvbench.results.hit_blocks and
	.kvbench.results.host_hit_blocks > 0 and
	.kvbench.host_tier.drops == 0 and .kvbench.host_tier.corrupt == 0 and
	.kvbench.host_tier.promotions >= .kvbench.results.host_hit_blocks and
	.kvbench.tier_compare.pool_only_result == "ok" and
	(.kvbench.tier_compare.tier_bound_gap | . <= $tol and . >= -$tol) and
	.kvbench.tier_compare.pool_only_hit_ratio <
		.kvbench.tier_compare.tier_hit_ratio - 0.05
' "$DIR/tier.json" >/dev/null ||
	fail "host tier: expected the bound with the tier, well above the pool alone"

# 2 MiB pool, 1 MiB host tier (4096 blocks), 8 MiB disk tier (2047 runs
# of 4 KiB) for ~33k committed blocks: the disk's hits are needed.
mkdir "$DIR/disk" || fail "mkdir $DIR/disk"
echo "kvbench --private-kvd=2M --host-tier-size 1M --disk-tier-size 8M --synthetic"
# shellcheck disable=SC2086 # GEOM and to are several words
$to "$BUILD/kvbench" --private-kvd=2M --kvd "$BUILD/kvd" \
	--host-tier-size 1M --disk-tier-size 8M \
	--disk-tier-path "$DIR/disk/tier" $GEOM -q --json "$DIR/disk.json" \
	--synthetic --limit 1000 -p 2 --model kvbench-disk ||
	fail "kvbench --disk-tier-size exit status $?"
jq -r '.kvbench | "  hit ratio \(.results.hit_ratio_total_blocks) (pool \(.results.hit_ratio_pool_blocks), host \(.results.hit_ratio_host_blocks), disk \(.results.hit_ratio_disk_blocks)); bound \(.results.bound_blocks); promotion \(.promotion.promotion_bw_MBps) MB/s, fio \(.promotion.fio) \(.promotion.fio_seq_read_MBps // .promotion.fio_note)"' "$DIR/disk.json"
jq -e --argjson tol "$TOL" '
	.kvbench.result == "ok" and
	.kvbench.results.stamp_errors == 0 and
	.kvbench.results.pool_hit_blocks + .kvbench.results.host_hit_blocks +
		.kvbench.results.disk_hit_blocks == .kvbench.results.hit_blocks and
	.kvbench.results.disk_hit_blocks > 0 and
	.kvbench.disk_tier.demotions > 0 and
	.kvbench.disk_tier.promotions >= .kvbench.results.disk_hit_blocks and
	.kvbench.disk_tier.corrupt == 0 and .kvbench.disk_tier.errors == 0 and
	.kvbench.disk_tier.read_p50_us > 0 and
	.kvbench.promotion.result == "ok" and
	.kvbench.promotion.disk_promotions > 0 and
	.kvbench.promotion.promotion_bw_MBps > 0 and
	(.kvbench.promotion.fio | . == "ok" or . == "not installed" or
		. == "failed")
' "$DIR/disk.json" >/dev/null ||
	fail "disk tier: expected disk hits and a promotion pass that read the disk"
left=$(ls -A "$DIR/disk")
[ -z "$left" ] || fail "disk tier: left behind in $DIR/disk: $left"

# Not kvd's: refused by kvd, never removed by kvbench.
echo "not a tier file" >"$DIR/disk/foreign"
# shellcheck disable=SC2086 # GEOM and to are several words
if $to "$BUILD/kvbench" --private-kvd=2M --kvd "$BUILD/kvd" \
	--host-tier-size 1M --disk-tier-size 8M --no-fio \
	--disk-tier-path "$DIR/disk/foreign" $GEOM -q \
	--synthetic --limit 10 -p 1 --model kvbench-foreign 2>"$DIR/foreign.err"; then
	fail "disk tier: kvd took a file that is not a kvd tier file"
fi
grep -q "not a kvd tier file" "$DIR/foreign.err" ||
	fail "disk tier: no word of the foreign file: $(cat "$DIR/foreign.err")"
[ "$(cat "$DIR/disk/foreign")" = "not a tier file" ] ||
	fail "disk tier: the foreign file was changed or removed"

echo "PASS"
