#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages kvd builds and tests with, when missing.
# Run by `make deps` (which make demo, test, check and bench run first;
# a plain make never does) and by .ci/run; `make bench` runs it with
# --bench, scripts/gpu-bundle.sh with --bundle.
set -eu

PKGS="build-essential clang libclang-rt-dev pkg-config liburing-dev \
libjemalloc-dev libcmocka-dev libxxhash-dev libssl-dev libjson-c-dev mandoc jq \
binutils libmicrohttpd-dev"
# The kvd Python package (python3-dev) and its tests: pytest, torch for
# CPU tensors, and what the vendored vLLM's modules import (numpy, cbor2,
# xxhash, psutil, typing-extensions).
PKGS="$PKGS python3-dev python3-pytest python3-torch python3-numpy \
python3-cbor2 python3-xxhash python3-psutil python3-typing-extensions"
# kvd's sd_notify (libsystemd), and systemd-analyze for the unit's check.
PKGS="$PKGS libsystemd-dev systemd"
# kvctl metrics' test: a real Prometheus text parser.
PKGS="$PKGS python3-prometheus-client"
# kvctl top draws with ncurses; its test runs it in a tmux pane.
PKGS="$PKGS libncurses-dev tmux"
# KV events: ZMQ PUB and msgpack (kvd), and their test's Python side.
PKGS="$PKGS libzmq3-dev libmsgpack-dev python3-zmq python3-msgpack"
# --bench: what `make bench` compares kvd with (kvbench --redis; fio,
# the disk's own sequential read beside kvbench --disk-tier-size's
# promotions) and counts kvd's system calls with (kvbench --perf-stat).
[ "${1:-}" = "--bench" ] && PKGS="$PKGS redis-server linux-perf fio"
# --bundle: what `make gpu-bundle` points the bundle's programs at its lib/ with.
[ "${1:-}" = "--bundle" ] && PKGS="$PKGS patchelf"

missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=""
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo"
else
	echo "install-deps: need root (or sudo) to install:$missing" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
