# SPDX-License-Identifier: MIT
"""Two vLLM engine processes sharing KV blocks through kvd.

Each engine is a process of this script (--engine) with vLLM v0.19's real
scheduler side: KVCacheManager (GPU prefix cache), OffloadingConnector in
the SCHEDULER role (OffloadingConnectorScheduler over KvdOffloadingManager),
and the real worker side, OffloadingConnectorWorker, whose handlers come
from KvdOffloadingSpec.get_handlers (register_kv_caches is bypassed: its
config helper needs the whole model; _register_handlers gets canonical
tensors built here). CPU tensors stand in for GPU memory; "prefill" fills
a request's GPU blocks with bytes derived from its token ids. The test
drives the steps vLLM's Scheduler and model runner would (schedule,
build_connector_meta, start_kv_transfers, prepare_store_kv, get_finished,
update_connector_output) and checks:

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
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kvdtest import BUILD, Kvd, need_vllm  # noqa: E402

BS, LAYERS, HEADS, HEAD = 16, 3, 2, 64
GPU_BLOCKS = 32
P1 = [(7 * i + 3) % 1000 for i in range(4 * BS + 5)]          # 4 full blocks + 5
P2 = P1[:4 * BS] + [(11 * i + 5) % 1000 for i in range(3 * BS + 3)]


def page_bytes(layer, tokens, index):
    """What 'prefill' writes for one full block of one layer."""
    seed = hashlib.sha256(repr((layer, index, tokens)).encode()).digest()
    return (seed * (2 * BS * HEADS * HEAD * 2 // 32 + 1))[:2 * BS * HEADS * HEAD * 2]


def expected(tokens, nblocks):
    return hashlib.sha256(b"".join(
        page_bytes(l, tuple(tokens[j * BS:(j + 1) * BS]), j)
        for j in range(nblocks) for l in range(LAYERS))).hexdigest()


# ------------------------------------------------------------ engine process
class Engine:
    def __init__(self, socket, factor):
        import torch
        from types import SimpleNamespace
        from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
            OffloadingConnectorWorker)
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
            OffloadingConnector)
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec, KVCacheTensor)
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory
        from vllm.v1.kv_offload.spec import CanonicalKVCaches, CanonicalKVCacheTensor
        import vllm_shim

        self.torch = torch
        spec = FullAttentionSpec(block_size=BS, num_kv_heads=HEADS, head_size=HEAD,
                                 dtype=torch.float16)
        self.page = spec.page_size_bytes
        names = [f"model.layers.{i}.attn" for i in range(LAYERS)]
        kvcfg = KVCacheConfig(
            num_blocks=GPU_BLOCKS,
            kv_cache_tensors=[KVCacheTensor(size=GPU_BLOCKS * self.page, shared_by=[n])
                              for n in names],
            kv_cache_groups=[KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec)])
        extra = {"spec_name": "KvdOffloadingSpec", "spec_module_path": "kvd.vllm",
                 "kvd_socket": socket}
        if factor > 1:
            extra["block_size"] = BS * factor
        cfg = vllm_shim.make_vllm_config(extra, block_size=BS)
        cfg.model_config = SimpleNamespace(model="test/engines", revision=None)
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(BS, sha256)
        self.kvm = KVCacheManager(kvcfg, max_model_len=1024, hash_block_size=BS)
        self.conn = OffloadingConnector(cfg, KVConnectorRole.SCHEDULER, kvcfg)
        self.sched = self.conn.connector_scheduler
        self.gpu = [torch.zeros(GPU_BLOCKS, self.page, dtype=torch.int8)
                    for _ in range(LAYERS)]
        self.worker = OffloadingConnectorWorker(
            OffloadingSpecFactory.create_spec(cfg, kvcfg))
        self.worker._register_handlers(CanonicalKVCaches(
            tensors=[CanonicalKVCacheTensor(tensor=t, page_size_bytes=self.page)
                     for t in self.gpu], group_data_refs=[[]]))
        self.n = 0

    def request(self, tokens):
        from types import SimpleNamespace
        from vllm.v1.request import Request
        self.n += 1
        params = SimpleNamespace(max_tokens=1, extra_args=None, structured_outputs=None,
                                 skip_reading_prefix_cache=False)
        return Request(f"req-{self.n}", list(tokens), params, None,
                       block_hasher=self.hasher)

    def step(self, so):
        """One engine step of the connector: scheduler meta, then worker."""
        meta = self.sched.build_connector_meta(so)
        self.worker.start_kv_transfers(meta)
        self.worker.prepare_store_kv(meta)
        return meta

    def output(self, finished=()):
        from vllm.v1.outputs import KVConnectorOutput
        sending, recving = self.worker.get_finished(set(finished))
        self.conn.update_connector_output(
            KVConnectorOutput(finished_sending=sending, finished_recving=recving))
        return sending, recving

    def schedule(self, req, blocks, n_new):
        from vllm.v1.core.sched.output import (CachedRequestData, NewRequestData,
                                               SchedulerOutput)
        return SchedulerOutput(
            scheduled_new_reqs=[NewRequestData.from_request(req, (blocks,))],
            scheduled_cached_reqs=CachedRequestData.make_empty(),
            num_scheduled_tokens={req.request_id: n_new},
            total_num_scheduled_tokens=n_new, scheduled_spec_decode_tokens={},
            scheduled_encoder_inputs={}, num_common_prefix_blocks=[0],
            finished_req_ids=set(), free_encoder_mm_hashes=[])

    def load(self, req, local, computed, ext):
        """vLLM's async load: WAITING_FOR_REMOTE_KVS until the worker is done."""
        from vllm.v1.core.sched.output import SchedulerOutput
        self.kvm.allocate_slots(req, 0, local, computed, num_external_computed_tokens=ext,
                                delay_cache_blocks=True)
        self.sched.update_state_after_alloc(req, self.kvm.get_blocks(req.request_id), ext)
        self.step(SchedulerOutput.make_empty())
        for _ in range(1000):
            if req.request_id in self.output()[1]:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError("the load never finished")
        req.num_computed_tokens = local + ext
        self.kvm.cache_blocks(req, req.num_computed_tokens)
        self.sched.update_state_after_alloc(req, self.kvm.get_blocks(req.request_id), 0)

    def prefill(self, blocks, tokens, start):
        for j in range(start // BS, len(tokens) // BS):
            for l in range(LAYERS):
                data = page_bytes(l, tuple(tokens[j * BS:(j + 1) * BS]), j)
                self.gpu[l][blocks[j]] = self.torch.frombuffer(
                    bytearray(data), dtype=self.torch.int8)

    def digest(self, blocks, nblocks):
        return hashlib.sha256(b"".join(bytes(self.gpu[l][blocks[j]].numpy())
                                       for j in range(nblocks)
                                       for l in range(LAYERS))).hexdigest()

    def run(self, tokens, stall=False):
        from vllm.v1.core.sched.output import SchedulerOutput
        req = self.request(tokens)
        computed, local = self.kvm.get_computed_blocks(req)
        ext, is_async = self.sched.get_num_new_matched_tokens(req, local)
        loaded = None
        if is_async:                    # scheduled again once loaded
            self.load(req, local, computed, ext)
            loaded = self.digest(self.kvm.get_block_ids(req.request_id)[0],
                                 (local + ext) // BS)
            n_new = len(tokens) - req.num_computed_tokens
            self.kvm.allocate_slots(req, n_new)
        else:
            n_new = len(tokens) - local
            self.kvm.allocate_slots(req, n_new, local, computed)
            self.sched.update_state_after_alloc(req, self.kvm.get_blocks(req.request_id), 0)
            req.num_computed_tokens = local
        blocks = self.kvm.get_block_ids(req.request_id)[0]
        self.prefill(blocks, tokens, req.num_computed_tokens)
        self.step(self.schedule(req, blocks, n_new))
        req.num_computed_tokens = len(tokens)
        if stall:
            self.stall_in_store()
        delayed, _ = self.sched.request_finished(req, blocks)
        so = SchedulerOutput.make_empty()
        so.finished_req_ids = {req.request_id}
        self.step(so)                   # the deferred store job starts here
        self.output({req.request_id})
        self.kvm.free(req)
        return {"local": local, "ext": ext, "loaded": loaded, "stored_later": delayed,
                "digest": self.digest(blocks, len(tokens) // BS)}

    def stall_in_store(self):
        """Make the coming store copy half the layers, then stop there."""
        store = self.worker.worker.transfer_type_to_handler[("GPU", "KVD")]
        copy = store._copy
        half = LAYERS // 2 + 1

        def copy_half(blocks, kspec, gspec, skip):
            store.gpu, store.offsets, store.pages = (
                store.gpu[:half], store.offsets[:half], store.pages[:half])
            copy(blocks, kspec, gspec, skip)
            print(json.dumps({"stalled": len(kspec.block_ids)}), flush=True)
            time.sleep(600)
        store._copy = copy_half


def engine_main(socket, factor):
    need_vllm()
    eng = Engine(socket, factor)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            eng.sched.manager.close()
            break
        out = eng.run(cmd["tokens"], stall=cmd.get("stall", False))
        print(json.dumps(out), flush=True)


# ------------------------------------------------------------------ the test
class Proc:
    def __init__(self, k, factor):
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
        self.p = subprocess.Popen([sys.executable, __file__, "--engine", k.socket,
                                   str(factor)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        assert self.reply() == {"ready": True}

    def reply(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"engine exited: {self.p.wait()}")

    def run(self, tokens, **kw):
        self.p.stdin.write(json.dumps({"op": "run", "tokens": tokens, **kw}) + "\n")
        self.p.stdin.flush()
        return self.reply()

    def quit(self):
        self.p.stdin.write('{"op": "quit"}\n')
        self.p.stdin.close()
        assert self.p.wait(timeout=30) == 0


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
    a.p.stdin.write(json.dumps({"op": "run", "tokens": P2, "stall": True}) + "\n")
    a.p.stdin.flush()
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
    if len(sys.argv) == 4 and sys.argv[1] == "--engine":
        return engine_main(sys.argv[2], int(sys.argv[3]))
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
