# SPDX-License-Identifier: MIT
"""make demo-vllm: two vLLM engine processes share a system prompt via kvd.

Starts kvd (host backend, sockets in a temp dir), then engine processes
of tools/vllm_engine.py: vLLM v0.19's real scheduler and offloading
connector code with kvd.vllm.KvdOffloadingSpec, the flag a vLLM user
gives, over CPU tensors standing in for the GPU. Engine A answers a
request with a 512-token system prompt and stores its KV in kvd; engine B,
started afterwards, gets the system prompt as a prefix hit from kvd and
loads bytes equal to A's; A is restarted and hits again. kvctl shows the
namespace the engines share. Ends with kvd's books checked, kvd stopped
and `demo-vllm: ok` (exit 0), or `demo-vllm: FAILED` (exit 1).

Needs the vendored vLLM sources (../shared/vendor beside the checkout,
or $KVD_VLLM_VENDOR): there is no vLLM package on Debian.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
O = os.environ.get("O", "build")
BUILD = os.path.join(ROOT, O)
VENDOR = os.environ.get("KVD_VLLM_VENDOR") or os.path.join(
    os.path.dirname(ROOT), "shared", "vendor")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from vllm_engine import BS, EngineProcess, expected  # noqa: E402

MODEL = "demo/tiny-llama"
LAYERS, HEADS, HEAD, GPU_BLOCKS = 4, 8, 128, 128        # 64 KiB pages
SYSTEM = [(31 * i + 7) % 32000 for i in range(512)]     # 32 blocks
QUESTION = {"A": [(17 * i + 1) % 32000 for i in range(45)],
            "B": [(13 * i + 2) % 32000 for i in range(61)],
            "A'": [(19 * i + 3) % 32000 for i in range(38)]}


def say(msg=""):
    print(msg, flush=True)


class Kvd:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvd-demo-vllm.")
        self.sock = os.path.join(self.dir, "kvd.sock")
        self.admin = os.path.join(self.dir, "kvd-admin.sock")
        self.log = open(os.path.join(self.dir, "kvd.log"), "wb")
        self.p = subprocess.Popen(
            [os.path.join(BUILD, "kvd"), "--backend", "host", "--pool-size", "256M",
             "--socket", self.sock, "--admin-socket", self.admin],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        self.kvctl("wait", "--timeout", "10")

    def kvctl(self, *args):
        r = subprocess.run([os.path.join(BUILD, "kvctl"), "--admin-socket",
                            self.admin, *args], capture_output=True, text=True,
                           timeout=30)
        if r.returncode:
            raise RuntimeError(f"kvctl {' '.join(args)}: {r.stderr.strip()}")
        return json.loads(r.stdout) if "--json" in args else r.stdout

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(timeout=10)
        self.log.close()
        return rc

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Engine(EngineProcess):
    def __init__(self, name, kvd):
        self.name = name
        super().__init__(kvd.sock, 1, (LAYERS, HEADS, HEAD, GPU_BLOCKS, MODEL),
                         vendor=VENDOR, build=O)

    def run(self, tokens):
        t0 = time.monotonic()
        r = super().run(tokens)
        r["ms"] = (time.monotonic() - t0) * 1000
        return r


def request(eng, checks):
    prompt = SYSTEM + QUESTION[eng.name]
    r = eng.run(prompt)
    hit = r["ext"]
    say(f"  engine {eng.name:2} (pid {eng.p.pid}): prompt of {len(prompt)} tokens: "
        f"{r['local']} from its own GPU cache, {hit} from kvd, "
        f"{len(prompt) - r['local'] - hit} computed; {r['ms']:.0f} ms")
    if hit:
        same = r["loaded"] == expected(SYSTEM, hit // BS, LAYERS, HEADS, HEAD)
        say(f"             the {hit // BS} blocks loaded from kvd equal the ones "
            f"engine A computed, byte for byte: {'yes' if same else 'NO'}")
        checks.append(same)
    checks.append(r["digest"] == expected(prompt, len(prompt) // BS, LAYERS,
                                          HEADS, HEAD))
    return hit


def namespace(kvd):
    for ns in kvd.kvctl("status", "--json")["namespaces"]:
        if ns["model"] == MODEL:
            return ns
    return None


def demo(kvd):
    checks = []
    say("== kvd on the host backend (256 MiB), vLLM v0.19's scheduler and "
        "offloading connector with kvd.vllm.KvdOffloadingSpec")
    say(f"   model {MODEL}: {LAYERS} layers x {HEADS} KV heads x {HEAD}, fp16, "
        f"{BS}-token blocks; a system prompt of {len(SYSTEM)} tokens")
    a = Engine("A", kvd)
    checks.append(request(a, checks) == 0)
    b = Engine("B", kvd)
    hit_b = request(b, checks)
    checks.append(hit_b == len(SYSTEM))
    ns = namespace(kvd)
    say("== kvctl status: the namespace both engines share")
    say(f"   model {ns['model']}  rev {ns['rev']}  dtype {ns['dtype']}  "
        f"{ns['layers']} runs x {ns['head_dim']} bytes = {ns['block_bytes']} bytes "
        f"a block, {ns['block_tokens']} tokens")
    say(f"   {ns['cached_blocks']} blocks cached (committed, held by none) of the "
        f"{ns['blocks']} its slabs hold; {ns['clients']} clients (each engine's "
        f"scheduler and worker); hit ratio {ns['hit_ratio']:.3f} (blocks hit / "
        f"blocks looked up)")
    checks.append(ns["clients"] == 4 and ns["dtype"] == "opaque")
    say("== engine A restarts: the prefix cache outlives it")
    checks.append(a.quit() == 0)
    a2 = Engine("A'", kvd)
    checks.append(request(a2, checks) == len(SYSTEM))
    for e in (b, a2):
        checks.append(e.quit() == 0)
    return checks, hit_b


def main():
    if not os.path.isfile(os.path.join(VENDOR, "vllm_shim.py")):
        say(f"demo-vllm: the vendored vLLM sources are not at {VENDOR} "
            "(set KVD_VLLM_VENDOR): Debian has no vLLM package")
        say("demo-vllm: FAILED")
        return 1
    if not os.path.exists(os.path.join(BUILD, "python", "kvd", "vllm.py")):
        say(f"demo-vllm: {BUILD}/python/kvd is not built (make, with python3-dev)")
        say("demo-vllm: FAILED")
        return 1
    kvd = Kvd()
    try:
        checks, hit = demo(kvd)
        held = sum(n["blocks_used"] for n in kvd.kvctl("status", "--json")["namespaces"])
        kvd.kvctl("check")
        rc = kvd.stop()
        gone = not os.path.exists(kvd.sock)
        say("== summary")
        say(f"   shared:     engine B hit {hit} of its prompt's tokens in kvd "
            f"(the system prompt engine A stored); A, restarted, hit them again")
        say(f"   bytes:      every loaded block equal to the stored one: "
            f"{'yes' if all(checks) else 'NO'}")
        say(f"   cleaned up: kvctl check passed, {held} blocks held, kvd exit {rc}, "
            f"sockets {'removed' if gone else 'LEFT'}")
        ok = all(checks) and held == 0 and rc == 0 and gone
    except Exception as e:      # noqa: BLE001
        say(f"demo-vllm: {e}")
        ok = False
    finally:
        kvd.close()
    say("demo-vllm: ok" if ok else "demo-vllm: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
