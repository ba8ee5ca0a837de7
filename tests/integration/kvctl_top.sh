#!/bin/sh
# SPDX-License-Identifier: MIT
# kvctl top in a real terminal: a private kvd, a synthetic replay
# against it in the background, and kvctl top --interval 200 in a tmux
# session of our own (its own server socket in the test's temp dir).
# The captured pane shows the pool line, the replay's namespace row with
# a hit ratio, and the table's header; q ends kvctl with status 0 and so
# the session; with kvd stopped the view says so instead of exiting;
# without a terminal kvctl top refuses with status 2.
# Exit 0 pass, 1 fail, 77 skip (no tmux).
# usage: sh tests/integration/kvctl_top.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=kvctl-top
GEOM="--layers 1 --kv-heads 1 --head-dim 4 --block-tokens 16"
. "$ROOT/tests/integration/kvd_test.shlib"

command -v tmux >/dev/null 2>&1 || skip "tmux not installed"
for bin in kvd kvctl kvbench; do
	[ -x "$BUILD/$bin" ] || fail "$BUILD/$bin not built"
done
BUILD=$(cd "$BUILD" && pwd)

test_dir top
TMUX_SOCK=$DIR/tmux.sock
BENCH_PID=

# The tmux server and the replay go before kvd (kvd_test.shlib's cleanup).
top_cleanup() {
	tmux -S "$TMUX_SOCK" kill-server 2>/dev/null
	[ -n "$BENCH_PID" ] && kill "$BENCH_PID" 2>/dev/null && wait "$BENCH_PID"
	cleanup
}
trap top_cleanup EXIT

pane() {
	tmux -S "$TMUX_SOCK" capture-pane -p -t top
}

# wait_pane PATTERN: the pane shows PATTERN (grep -E) within 5 s.
wait_pane() {
	i=0
	while ! pane | grep -Eq "$1"; do
		i=$((i + 1))
		[ $i -le 50 ] || return 1
		sleep 0.1
	done
}

start_kvd top 64M --config /dev/null

if "$BUILD/kvctl" --admin-socket "$ADMIN" top >"$DIR/pipe.out" 2>&1; then
	fail "kvctl top ran with stdout not a terminal"
else
	rc=$?
	[ $rc -eq 2 ] || fail "kvctl top without a terminal: exit $rc, not 2"
fi
grep -q "needs a terminal" "$DIR/pipe.out" ||
	fail "kvctl top without a terminal said: $(cat "$DIR/pipe.out")"

# Long enough (a few seconds) that top sees it running.
# shellcheck disable=SC2086 # GEOM is several words
"$BUILD/kvbench" --socket "$SOCK" $GEOM -q --synthetic --limit 60000 -p 2 \
	--model "$MODEL" >"$DIR/bench.log" 2>&1 &
BENCH_PID=$!

TERM=xterm tmux -S "$TMUX_SOCK" new-session -d -s top -x 120 -y 40 \
	"'$BUILD/kvctl' --admin-socket '$ADMIN' top --interval 200; echo \$? >'$DIR/top.rc'" ||
	fail "tmux new-session"

wait_pane "$MODEL .*[0-9]+\.[0-9]%" ||
	{ pane; fail "no row of namespace $MODEL with a hit ratio"; }
sleep 1		# a few polls: the per-interval columns filled in
pane >"$DIR/pane.txt"
cat "$DIR/pane.txt"
grep -Eq "^pool .* pages [0-9]+/[0-9]+ used \[[#.]+\]" "$DIR/pane.txt" ||
	fail "no pool line with pages used and a bar"
grep -Eq "kvd pid $KVD_PID," "$DIR/pane.txt" || fail "no kvd pid $KVD_PID"
grep -Eq "NS +MODEL +BLOCKS +USED +CACHED +PINNED +HIT% +HIT%NOW +EVICT/S +CLIENTS" \
	"$DIR/pane.txt" || fail "no namespace table header"
grep -Eq "^ *[0-9]+ +$MODEL +([0-9]+ +){4}[0-9.]+% +([0-9.]+%|-) +([0-9.]+|-) +[0-9]+$" \
	"$DIR/pane.txt" || fail "the namespace row is not as the header says"

wait "$BENCH_PID" || fail "kvbench exit status $?"
BENCH_PID=

# kvd gone: the view says so and keeps asking.
stop_kvd
wait_pane "kvd not answering on .*retrying" ||
	{ pane; fail "kvctl top did not say that kvd stopped answering"; }

tmux -S "$TMUX_SOCK" send-keys -t top q
i=0
while tmux -S "$TMUX_SOCK" has-session -t top 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 50 ] || fail "kvctl top still running 5 s after q"
	sleep 0.1
done
[ "$(cat "$DIR/top.rc" 2>/dev/null)" = 0 ] ||
	fail "kvctl top exit status $(cat "$DIR/top.rc" 2>/dev/null) after q"

echo "PASS"
