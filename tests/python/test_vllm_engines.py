# SPDX-License-Identifier: MIT
"""Two vLLM engine processes sharing KV blocks through kvd.

Each engine is a process of tools/vllm_engine.py: vLLM v0.19's real
scheduler side (KVCacheManager, OffloadingConnector in the SCHEDULER role
over KvdOffloadingManager) and real worker side (OffloadingConnectorWorker
with KvdOffloadingSpec's handlers), CPU tensors standing in for GPU
memory, "prefill" writing bytes derived from the token ids. The test
checks:

1. engine A prefills a prompt and stores its 4 full GPU blocks in kvd
   (a chain in kvd's prefix tree: parents as the scheduler's touch() saw);
   engine B, started afterwards, gets them as a prefix hit
   (get_num_new_matched_tokens > 0), loads them, and its GPU blocks equal
   A's byte for byte;
2. A extends the prompt by 3 blocks and is SIGKILLed half-way through
   writing them to kvd (after prepare_store, in the store's copy); engine
   C, started then, with the prompt's first GPU block in its own prefix
   cache, hits the committed blocks only, correct bytes, the uncommitted
   ones miss; `kvctl check` passes, and once the engines are gone no block
   is held and no client is left.

All of it twice: offloaded blocks of one GPU block, and of two
(block_size 32: C's load then starts inside an offloaded block).
"""
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kvdtest import BUILD, ROOT, VENDOR, Kvd, need_vllm  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
from vllm_engine import BS, EngineProcess, expected  # noqa: E402

P1 = [(7 * i + 3) % 1000 for i in range(4 * BS + 5)]          # 4 full blocks + 5
P2 = P1[:4 * BS] + [(11 * i + 5) % 1000 for i in range(3 * BS + 3)]


# ------------------------------------------------------------------ the test
class Proc(EngineProcess):
    def __init__(self, k, factor):
        super().__init__(k.socket, factor, vendor=VENDOR,
                         build=os.path.relpath(BUILD, ROOT))

    def quit(self):
        assert super().quit() == 0


def held(k):
    st = k.kvctl("status", "--json")
    return sum(ns["blocks_used"] for ns in st["namespaces"]), st["nr_clients"]


def wait_for(k, want):
    for _ in range(100):
        if held(k) == want:
            return True
        time.sleep(0.05)
    print("kvd:", held(k), "want", want)
    return False


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:", what)


def test(k, factor):
    """The scenario with offloaded blocks of `factor` GPU blocks."""
    off = BS * factor
    a = Proc(k, factor)
    r = ra = a.run(P1)
    check(r["local"] == 0 and r["ext"] == 0, "A: nothing cached anywhere for P1")
    check(r["digest"] == expected(P1, 4), "A: prefill wrote P1's 4 blocks")
    tree = k.kvctl("--json", "prefix", "--tree", "--depth", "8")["tree"]
    check([n["depth"] for n in tree] == list(range(64 // off)),
          f"kvd: {64 // off} blocks of {off} tokens, one chain (parents from touch)")

    b = Proc(k, factor)
    r = b.run(P1)
    check(r["ext"] == 64, f"B: P1 hits A's blocks in kvd ({r['ext']} tokens)")
    check(r["loaded"] == ra["digest"] == expected(P1, 4),
          "B: loaded bytes equal A's, byte for byte")

    new = len(P2) // off - 64 // off
    a.send(P2, stall=True)
    r = a.reply()
    check(r == {"stalled": new}, f"A: stopped half-way through storing P2's {new} new blocks")
    check(held(k)[0] == new, f"kvd: A holds the {new} uncommitted blocks")
    a.p.send_signal(signal.SIGKILL)
    a.p.wait()
    check(wait_for(k, (0, 2)), "kvd: A's blocks released when it died (B's 2 clients left)")

    c = Proc(k, factor)
    c.run(P2[:BS] + [999] * 5)                  # P2's first GPU block, cached in C
    r = c.run(P2)
    check(r["local"] == BS and r["ext"] == 64 - BS,
          f"C: P2 hits its own first GPU block, then kvd's committed blocks only "
          f"({r['ext']} tokens{', the first load inside a block' if factor > 1 else ''})")
    check(r["loaded"] == expected(P2, 4), "C: their bytes are correct")
    check(r["digest"] == expected(P2, 7), "C: computed the 3 others itself")
    check(k.kvctl("check", check=False).returncode == 0, "kvctl check passes")
    b.quit()
    c.quit()
    check(wait_for(k, (0, 0)), "kvd: no block held, no client left")


def main():
    need_vllm()
    if not os.path.exists(os.path.join(BUILD, "python", "kvd", "vllm.py")):
        print("SKIP: the kvd Python package is not built (python3-dev)", file=sys.stderr)
        return 77
    t0 = time.monotonic()
    for factor in (1, 2):
        print(f"== offloaded blocks of {factor} GPU block(s)")
        with Kvd(pool="64M") as k:
            try:
                test(k, factor)
            except AssertionError as e:
                print(f"FAIL: {e}\n{k.tail()}", file=sys.stderr)
                return 1
    print(f"PASS ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
