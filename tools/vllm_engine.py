# SPDX-License-Identifier: MIT
"""A stand-in vLLM engine process over kvd, for tests and make demo-vllm.

vLLM v0.19's real scheduler side: KVCacheManager (its GPU prefix cache),
OffloadingConnector in the SCHEDULER role (OffloadingConnectorScheduler
over kvd.vllm's KvdOffloadingManager), and the real worker side,
OffloadingConnectorWorker, whose handlers come from
KvdOffloadingSpec.get_handlers (register_kv_caches is bypassed: its
config helper needs the whole model; _register_handlers gets canonical
tensors built here). CPU tensors stand in for GPU memory; "prefill" fills
a request's GPU blocks with bytes derived from its token ids
(page_bytes), so any wrong, stale or foreign block shows in a digest.
Engine.run() drives one request through the steps vLLM's Scheduler and
model runner take (schedule, build_connector_meta, start_kv_transfers,
prepare_store_kv, get_finished, update_connector_output).

The vendored vLLM must be importable first (vllm_shim.install()), and the
kvd package (build/python). As a process:

    python3 tools/vllm_engine.py SOCKET FACTOR [LAYERS HEADS HEAD GPU_BLOCKS MODEL]

reads {"op": "run", "tokens": [...]} lines and answers each with
{"local", "ext", "loaded", "digest", ...}; {"op": "quit"} ends it.
"""
import hashlib
import json
import os
import subprocess
import sys
import time


def _shim():
    """Install the vendored vLLM's shim from the developers' workspace
    (../shared/vendor beside the checkout, or $KVD_VLLM_VENDOR)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    vendor = os.environ.get("KVD_VLLM_VENDOR") or os.path.join(
        os.path.dirname(root), "shared", "vendor")
    sys.path.insert(0, vendor)
    sys.path.insert(0, os.path.join(root, os.environ.get("O", "build"), "python"))
    import vllm_shim
    vllm_shim.install()


BS = 16                         # vLLM's GPU block size, tokens


def page_bytes(layer, tokens, index, page):
    """What 'prefill' writes for one full block of one layer: `page`
    bytes that only the layer, the block's place and its tokens decide."""
    seed = hashlib.sha256(repr((layer, index, tokens)).encode()).digest()
    return (seed * (page // 32 + 1))[:page]


def expected(tokens, nblocks, layers=3, heads=2, head=64):
    """The digest an engine's digest() gives for those blocks."""
    page = 2 * BS * heads * head * 2
    return hashlib.sha256(b"".join(
        page_bytes(l, tuple(tokens[j * BS:(j + 1) * BS]), j, page)
        for j in range(nblocks) for l in range(layers))).hexdigest()


# ------------------------------------------------------------ engine process
class Engine:
    """One engine: vLLM's scheduler side and worker side over CPU tensors
    of `layers` fp16 layers of `heads` KV heads of `head` dims."""

    def __init__(self, socket, factor, layers=3, heads=2, head=64,
                 gpu_blocks=32, model="test/engines", max_len=1024):
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
        self.layers = layers
        spec = FullAttentionSpec(block_size=BS, num_kv_heads=heads, head_size=head,
                                 dtype=torch.float16)
        self.page = spec.page_size_bytes
        names = [f"model.layers.{i}.attn" for i in range(layers)]
        kvcfg = KVCacheConfig(
            num_blocks=gpu_blocks,
            kv_cache_tensors=[KVCacheTensor(size=gpu_blocks * self.page, shared_by=[n])
                              for n in names],
            kv_cache_groups=[KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec)])
        extra = {"spec_name": "KvdOffloadingSpec", "spec_module_path": "kvd.vllm",
                 "kvd_socket": socket}
        if factor > 1:
            extra["block_size"] = BS * factor
        cfg = vllm_shim.make_vllm_config(extra, block_size=BS)
        cfg.model_config = SimpleNamespace(model=model, revision=None)
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(BS, sha256)
        self.kvm = KVCacheManager(kvcfg, max_model_len=max_len, hash_block_size=BS)
        self.conn = OffloadingConnector(cfg, KVConnectorRole.SCHEDULER, kvcfg)
        self.sched = self.conn.connector_scheduler
        self.gpu = [torch.zeros(gpu_blocks, self.page, dtype=torch.int8)
                    for _ in range(layers)]
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
            for l in range(self.layers):
                data = page_bytes(l, tuple(tokens[j * BS:(j + 1) * BS]), j, self.page)
                self.gpu[l][blocks[j]] = self.torch.frombuffer(
                    bytearray(data), dtype=self.torch.int8)

    def digest(self, blocks, nblocks):
        return hashlib.sha256(b"".join(bytes(self.gpu[l][blocks[j]].numpy())
                                       for j in range(nblocks)
                                       for l in range(self.layers))).hexdigest()

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
        half = self.layers // 2 + 1

        def copy_half(blocks, kspec, gspec, skip):
            store.gpu, store.offsets, store.pages = (
                store.gpu[:half], store.offsets[:half], store.pages[:half])
            copy(blocks, kspec, gspec, skip)
            print(json.dumps({"stalled": len(kspec.block_ids)}), flush=True)
            time.sleep(600)
        store._copy = copy_half


def engine_main(socket, factor, **geometry):
    """The engine process: JSON commands on stdin, answers on stdout."""
    eng = Engine(socket, factor, **geometry)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "quit":
            eng.sched.manager.close()
            break
        out = eng.run(cmd["tokens"], stall=cmd.get("stall", False))
        print(json.dumps(out), flush=True)


class EngineProcess:
    """The other end: an engine process of this file, driven by JSON."""

    def __init__(self, socket, factor=1, args=(), vendor=None, build="build"):
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
                   O=build)
        if vendor:
            env["KVD_VLLM_VENDOR"] = vendor
        self.p = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), socket, str(factor),
             *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if self.reply() != {"ready": True}:
            raise RuntimeError("the engine did not start")

    def reply(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"engine exited ({self.p.wait()})")

    def send(self, tokens, **kw):
        self.p.stdin.write(json.dumps({"op": "run", "tokens": tokens, **kw}) + "\n")
        self.p.stdin.flush()

    def run(self, tokens, **kw):
        self.send(tokens, **kw)
        return self.reply()

    def quit(self):
        """Ask it to stop; its exit status."""
        self.p.stdin.write('{"op": "quit"}\n')
        self.p.stdin.close()
        return self.p.wait(timeout=30)


if __name__ == "__main__":
    _shim()
    a = sys.argv[1:]
    geo = {}
    if len(a) >= 7:
        geo = dict(layers=int(a[2]), heads=int(a[3]), head=int(a[4]),
                   gpu_blocks=int(a[5]), model=a[6], max_len=int(a[5]) * BS)
    engine_main(a[0], int(a[1]), **geo)
