#!/bin/sh
# SPDX-License-Identifier: MIT
# sd_notify (kvd/notify.c): kvd under $NOTIFY_SOCKET, a datagram socket
# of the test's own, as a Type=notify unit runs it. READY=1 comes once,
# and only when the client socket already accepts: a kvd client
# connected the moment it arrives succeeds. A STATUS= line with the
# client count follows within a few seconds, "1 clients" while one is
# connected, and STOPPING=1 at SIGTERM. Without $NOTIFY_SOCKET kvd runs
# as ever (every other test).
# Exit 0 pass, 1 fail, 77 skip (no python3 or no kvd Python package).
# usage: sh tests/integration/notify.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/integration/kvd_test.shlib"

PYTHON=${PYTHON:-/usr/bin/python3}
[ -x "$PYTHON" ] || skip "no $PYTHON"
[ -x "$BUILD/kvd" ] || fail "$BUILD/kvd not built"
[ -d "$BUILD/python/kvd" ] || skip "the kvd Python package is not built"
test_dir notify
PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 \
	"$PYTHON" - "$BUILD/kvd" "$DIR" <<'EOF_PY' || fail "see above"
import os, re, signal, socket, subprocess, sys, time
import kvd

KVD, DIR = sys.argv[1], sys.argv[2]
SOCK, ADMIN = os.path.join(DIR, "k.sock"), os.path.join(DIR, "k-admin.sock")
GEOM = dict(layers=2, kv_heads=2, head_dim=64, block_tokens=16)
STATUS = re.compile(r"STATUS=(\d+) clients, (\d+)/(\d+) pool pages used$")

def die(why):
    print("FAIL:", why)
    sys.exit(1)

ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
ns.bind(os.path.join(DIR, "notify"))
env = dict(os.environ, NOTIFY_SOCKET=os.path.join(DIR, "notify"))
log = open(os.path.join(DIR, "kvd.log"), "ab")
p = subprocess.Popen([KVD, "--backend", "host", "--pool-size", "64M",
                      "--socket", SOCK, "--admin-socket", ADMIN],
                     env=env, stderr=log)
msgs = []

def recv(timeout):
    ns.settimeout(timeout)
    try:
        m = ns.recv(4096).decode()
    except socket.timeout:
        return None
    msgs.extend(m.split("\n"))
    return m

try:
    m = recv(10)
    if m is None:
        die("no notification within 10 s")
    if "READY=1" not in m.split("\n"):
        die("first notification without READY=1: %r" % m)
    # The moment READY=1 arrived: the client socket serves.
    c = kvd.Client("notify-test", socket_path=SOCK, **GEOM)
    print("READY=1, then a client connected")
    seen = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = recv(deadline - time.monotonic())
        if m is None:
            break
        for line in m.split("\n"):
            s = STATUS.match(line)
            if s and s.group(1) == "1":
                seen = line
        if seen:
            break
    if not seen:
        die("no STATUS= line with 1 client in 5 s: %r" % msgs)
    print("saw", seen)
    c.close()
    p.send_signal(signal.SIGTERM)
    if p.wait(10) != 0:
        die("kvd exit status %d" % p.returncode)
    while recv(0.2) is not None:
        pass
finally:
    if p.poll() is None:
        p.kill()
        p.wait()
print("notifications:", msgs)
if msgs.count("READY=1") != 1:
    die("READY=1 came %d times" % msgs.count("READY=1"))
if "STOPPING=1" not in msgs:
    die("no STOPPING=1 at SIGTERM")
for line in msgs:
    if line and not (line in ("READY=1", "STOPPING=1") or STATUS.match(line)):
        die("unexpected notification %r" % line)
EOF_PY
echo PASS
