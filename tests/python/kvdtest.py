# SPDX-License-Identifier: MIT
"""The Python tests' harness: a private kvd on sockets in a temp dir.

    from kvdtest import Kvd, BUILD
    with Kvd(pool="64M") as k:            # build/kvd --backend host ...
        c = kvd.Client("m", socket_path=k.socket, layers=1, ...)
        print(k.kvctl("status", "--json"))
    # kvd stopped (SIGTERM, then SIGKILL), its directory removed

The kvd is started with PR_SET_PDEATHSIG-like care: it is killed when
the Kvd object is closed or when the interpreter exits (atexit), so
nothing a test starts outlives it. BUILD is $O (default build/) made
absolute; build/python goes first on sys.path so `import kvd` finds the
extension built there.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("O", "build")))
sys.path.insert(0, os.path.join(BUILD, "python"))

SHARED = os.path.abspath(os.path.join(ROOT, "..", "shared"))
VENDOR = os.environ.get("KVD_VLLM_VENDOR") or os.path.join(SHARED, "vendor")
VLLM_DIR = os.path.join(VENDOR, "vllm-v0.19.0")

_live = []


def _kill_all():
    for k in list(_live):
        k.close()


atexit.register(_kill_all)


def need_vllm():
    """Exit 77 (skipped, with the reason) when the vendored vLLM is absent."""
    if not os.path.isdir(VLLM_DIR):
        print(f"SKIP: {VLLM_DIR} is absent: the vendored vLLM v0.19.0 "
              "sources are needed for this test ($KVD_VLLM_VENDOR names "
              "their folder)", file=sys.stderr)
        sys.exit(77)
    if VENDOR not in sys.path:
        sys.path.insert(0, VENDOR)
    import vllm_shim
    vllm_shim.install()
    return vllm_shim


class Kvd:
    """kvd on the host backend, sockets in a fresh temp dir."""

    def __init__(self, pool="64M", *args):
        self.dir = tempfile.mkdtemp(prefix="kvd-pytest.")
        self.socket = os.path.join(self.dir, "kvd.sock")
        self.admin = os.path.join(self.dir, "kvd-admin.sock")
        self.log = os.path.join(self.dir, "kvd.log")
        self.pool = pool
        self.args = list(args)
        self.proc = None
        self.start()
        _live.append(self)

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "kvd"), "--backend", "host",
             "--pool-size", self.pool, "--socket", self.socket,
             "--admin-socket", self.admin, *self.args],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        logf.close()
        self.kvctl("wait", "--timeout", "10")

    def kvctl(self, *args, check=True):
        """Run kvctl against this kvd; its stdout (parsed when --json)."""
        env = dict(os.environ, KVD_SOCKET=self.socket)
        r = subprocess.run([os.path.join(BUILD, "kvctl"), "--admin-socket",
                            self.admin, *args], env=env,
                           capture_output=True, text=True, timeout=30)
        if check and r.returncode:
            raise RuntimeError(f"kvctl {' '.join(args)}: exit {r.returncode}: "
                               f"{r.stderr.strip()}\n{self.tail()}")
        if "--json" in args and r.returncode == 0:
            return json.loads(r.stdout)
        return r.stdout if check else r

    def tail(self, n=20):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM):
        """Stop kvd; returns its exit status."""
        if not self.proc:
            return None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def restart(self):
        self.stop()
        self.start()

    def close(self):
        if self.proc:
            self.stop(signal.SIGKILL if sys.exc_info()[0] else signal.SIGTERM)
        if self in _live:
            _live.remove(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# What the binding's tests share: a small geometry, a client of it.
GEOM = dict(layers=2, kv_heads=2, head_dim=64, block_tokens=16)  # 16 KiB blocks


def client(k, model="m", **kw):
    """A kvd.Client of model @model on Kvd @k, GEOM with @kw over it."""
    import kvd

    g = dict(GEOM)
    g.update(kw)
    return kvd.Client(model, socket_path=k.socket, **g)
