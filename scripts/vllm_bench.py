#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""kvd's vLLM offloading plug-in against vLLM's own CPU offloading, one run.

    /usr/bin/python3 scripts/vllm_bench.py [--json build/bench-vllm.json]
    make bench-vllm

Both sides are real code: kvd.vllm.KvdOffloadingSpec ($O/python/kvd, on
private kvds this script starts: $O/kvd --backend host, sockets in a temp
dir, stopped with SIGTERM at the end; tests/python/kvdtest.py's Kvd) and
vLLM v0.19.0's unmodified CPUOffloadingSpec / CPUOffloadingManager,
imported from the vendored sources through vllm_shim (../shared/vendor
beside the checkout, or --vendor DIR). Without the vendored sources or
the workload (--workload FILE) the script says which is missing and
exits 77. Nothing here fails on a timing.

1. Scheduler-side cost per request (the managers)

The workload is shared_prompts.kvdtrc, the block-manager workload of
`make bench`: 1,000 requests, each one of 10 system prompts of 512 tokens
and a unique suffix of 64 to 2,048 tokens, block size 16. Each request's
block hashes are vLLM's own, set up as vLLM's EngineCore does:
get_hash_fn_by_name("sha256") (the default prefix_caching_hash_algo),
init_none_hash (with PYTHONHASHSEED=0) and get_request_block_hasher(16),
run by a real vllm.v1.request.Request; computed once, before any timing,
the same lists for both managers.

A pass replays the 1,000 requests one after the other on a fresh
manager, each as vLLM's OffloadingConnectorScheduler
(distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py) drives
its manager for a request without GPU prefix hits, with the arguments it
passes (itertools.islice over the request's hashes; sets to the
completions):

    touch(all); lookup(all) -> hits                get_num_new_matched_tokens
    prepare_load(the first hits)                   update_state_after_alloc
      [worker: load]
    complete_load(set of them)                     update_connector_output
    prepare_store(the rest) -> to_store            _get_reqs_to_store
      [worker: store]
    touch(all); complete_store(set(to_store))      _get_reqs_to_store,
                                                   update_connector_output

Each manager call is timed alone (time.perf_counter_ns around it); a
request's cost is the sum over its calls: building the islices and sets
and the worker's copies are not timed. The garbage collector is off
during a pass. For kvd the worker is kvd's own store and load handlers
(a worker-side KvdOffloadingSpec on stand-in GPU tensors, as in part 2):
the blocks its manager commits are really written, and every load must
come back successful. vLLM's CPU handlers are CUDA only, so its manager
gets no worker. Pages are 256 bytes here (one layer, 1 KV head, head dim
4, bf16): what a manager does does not depend on the page size.

Both managers hold --blocks blocks (16,384, the workload's pool): vLLM's
through cpu_bytes_to_use = blocks x page (LRU, its default policy), kvd's
as a pool of exactly that many blocks of the namespace (the script checks
the client's max_blocks), restarted before every pass so that each starts
empty. The workload has 64,088 distinct blocks, so both evict; the
prompts' blocks, looked up by every request, stay. --passes (3) passes of
each manager, vLLM's and kvd's in turn; each figure is the median over
the passes of the pass's mean, p50 and p99 per request. Beside them: the
hit-token fraction, sum(hits x 16) / sum(tokens) as each manager's lookup
returned the hits (the two must agree: each prompt's first request
misses its 32 blocks, every later one hits them); the blocks evicted
(vLLM: prepare_store's block_hashes_evicted; kvd evicts by itself and
reports none, so its count is kvctl prefix's); the roots of kvd's prefix
tree after a pass (kvctl prefix --tree, which lists at most 1024): with
every stored chain linked to its parent there are as many as prompts;
and `kvctl check` of kvd's books after every pass (it must pass).

2. Handler copy bandwidth (the workers)

A worker-side KvdOffloadingSpec gets CanonicalKVCaches of --tensors (4)
int8 CPU tensors of shape (--gpu-blocks, page), standing in for vLLM's
GPU KV cache, with page = 16 tokens x 8 KV heads x 128 head dim x K,V x
2 bytes (bf16) = 64 KiB: one kvd block is 4 x 64 KiB. Its get_handlers()
gives the store (GPU -> kvd) and the load (kvd -> GPU) handler. A
scheduler-side spec's manager prepares --transfer-blocks (512) blocks
(prepare_store, later lookup and prepare_load); the GPU side uses as many
distinct random block ids. A transfer is handler.transfer_async(job,
(src, dst)), then handler.wait({job}) and get_finished(), where the job
must be reported successful; its time is from transfer_async to wait's
return. One untimed transfer each way (the mapping's page faults), then
--transfer-reps (10) timed ones each way; then the loaded blocks are
compared with the stored ones. The baselines move as many bytes (512 x
4 x 64 KiB = 128 MiB) in the same process and run, each after one
untimed copy: torch's dst.copy_(src) and ctypes.memmove of one contiguous
buffer, and torch copy_ page by page of the same scattered GPU blocks
into a plain tensor of kvd-sized blocks (a copy loop's cost). GB/s is
10^9 bytes per second; each figure is the median over the reps.

Output: the command line and the core count, a table (metric, kvd, vLLM
CPU or memcpy, ratio; times: kvd's over vLLM's; bandwidths: kvd's over
the baseline's), and the JSON report (--json, default $O/bench-vllm.json)
with every figure and the per-call p50/p99. Figures on a loaded 2-vCPU
machine move between runs by tens of percent: compare the ratios of one
run, not figures of different runs. kvd's per-call cost there is mostly
kvd's wake-up: a call that comes more than poll_us (50 us) after kvd
last served finds it asleep (--kvd-arg=--poll-us=N to see the effect).
"""
import argparse
import ctypes
import gc
import itertools
import json
import math
import os
import platform
import random
import shlex
import statistics
import struct
import sys
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
BUILD = os.path.abspath(os.path.join(ROOT, os.environ.get("O", "build")))

BLOCK_TOKENS = 16
KV_HEADS, HEAD_DIM = 8, 128          # bf16 pages of 64 KiB


def skip(msg):
    print(f"vllm_bench: SKIP: {msg}", file=sys.stderr)
    sys.exit(77)


def die(msg):
    print(f"vllm_bench: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- workload
def read_kvdtrc(path):
    """[(req_id, prompt_id, [token, ...]), ...] and the header's block size."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24 or data[:8] != b"KVDTRC01":
        die(f"{path}: not a kvdtrc file (magic KVDTRC01)")
    n, block_size, n_prompts, prompt_len = struct.unpack_from("<IIII", data, 8)
    off, reqs = 24, []
    for _ in range(n):
        rid, pid, nt = struct.unpack_from("<III", data, off)
        off += 12
        reqs.append((rid, pid, list(struct.unpack_from(f"<{nt}I", data, off))))
        off += 4 * nt
    if off != len(data):
        die(f"{path}: {len(data) - off} bytes after the last request")
    return reqs, block_size


def vllm_hashes(reqs, block_size):
    """Each request's block hashes, by vLLM's own hasher (what EngineCore
    sets up: get_hash_fn_by_name(prefix_caching_hash_algo), init_none_hash,
    get_request_block_hasher) through a real vllm Request."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import (get_request_block_hasher,
                                             init_none_hash)
    from vllm.v1.request import Request

    fn = get_hash_fn_by_name("sha256")
    seed = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"          # a fixed NONE_HASH
    try:
        init_none_hash(fn)
    finally:
        if seed is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = seed
    hasher = get_request_block_hasher(block_size, fn)
    sp = SimpleNamespace(max_tokens=1, extra_args=None, structured_outputs=None,
                         skip_reading_prefix_cache=False)
    out = []
    for rid, _pid, toks in reqs:
        r = Request(str(rid), toks, sp, None, block_hasher=hasher)
        assert len(r.block_hashes) == len(toks) // block_size
        out.append(list(r.block_hashes))
    return out


# ------------------------------------------------------------ vLLM configs
def kv_cache_config(n_tensors, gpu_blocks, kv_heads=KV_HEADS, head_dim=HEAD_DIM):
    """One full-attention group of n_tensors layers, one KV tensor each,
    bf16 pages of 2 x 16 x kv_heads x head_dim x 2 bytes."""
    import torch
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                            KVCacheGroupSpec, KVCacheTensor)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(n_tensors)]
    spec = FullAttentionSpec(block_size=BLOCK_TOKENS, num_kv_heads=kv_heads,
                             head_size=head_dim, dtype=torch.bfloat16)
    page = spec.page_size_bytes
    return KVCacheConfig(
        num_blocks=gpu_blocks,
        kv_cache_tensors=[KVCacheTensor(size=gpu_blocks * page, shared_by=[n])
                          for n in names],
        kv_cache_groups=[KVCacheGroupSpec(names, spec)]), page


def vllm_config(vllm_shim, extra):
    cfg = vllm_shim.make_vllm_config(extra, block_size=BLOCK_TOKENS)
    # kvd.vllm also reads the model's name and revision (its namespace).
    cfg.model_config = SimpleNamespace(model="kvd-bench/vllm-bench", revision=None)
    return cfg


def pool_for(block_bytes, blocks):
    """A --pool-size for at least `blocks` blocks of block_bytes: kvd's
    slabs are multiples of lcm(2 MiB, block_bytes) (the one address rule)."""
    slab = math.lcm(2 << 20, block_bytes)
    per_slab = slab // block_bytes
    return f"{-(-blocks // per_slab) * slab >> 20}M"


def handler_pair(spec, tensors, page):
    """spec.get_handlers() on CanonicalKVCaches of `tensors`: the store
    (GPU -> medium) and load (medium -> GPU) handlers."""
    from vllm.v1.kv_offload.mediums import GPULoadStoreSpec
    from vllm.v1.kv_offload.spec import (CanonicalKVCacheRef, CanonicalKVCaches,
                                         CanonicalKVCacheTensor)
    caches = CanonicalKVCaches(
        tensors=[CanonicalKVCacheTensor(tensor=t, page_size_bytes=page) for t in tensors],
        group_data_refs=[[CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=page)
                          for i in range(len(tensors))]])
    handlers = list(spec.get_handlers(caches))
    store = load = None
    for src_cls, dst_cls, h in handlers:
        if src_cls is GPULoadStoreSpec:
            store = h
        elif dst_cls is GPULoadStoreSpec:
            load = h
    if store is None or load is None:
        die(f"get_handlers() gave {[(s.__name__, d.__name__) for s, d, _ in handlers]}: "
            "no GPU -> medium and medium -> GPU pair")
    return store, load


def close_spec(spec):
    """Drop a kvd spec's connections (its manager's and its workers')."""
    m = getattr(spec, "_manager", None)
    if m is not None and hasattr(m, "close"):
        m.close()
    for h in getattr(spec, "_handlers", None) or ():
        pool = getattr(h, "pool", None)
        if pool is not None and hasattr(pool, "close"):
            pool.close()
            break


# --------------------------------------------------------------- managers
class Worker:
    """The worker side of a kvd manager pass: kvd's store and load
    handlers on stand-in GPU tensors, run (untimed) between prepare_* and
    complete_*: the blocks committed are written, each load must succeed."""

    def __init__(self, spec, n_tensors, gpu_blocks, page):
        import torch
        from vllm.v1.kv_offload.mediums import GPULoadStoreSpec
        self.GPU = GPULoadStoreSpec
        tensors = [torch.zeros((gpu_blocks, page), dtype=torch.int8)
                   for _ in range(n_tensors)]
        self.store, self.load = handler_pair(spec, tensors, page)
        self.job = itertools.count(1)

    def stored(self, start, out):
        n = len(out.block_hashes_to_store)
        if n:
            src = self.GPU(list(range(start, start + n)), group_sizes=(n,))
            run_handler(self.store, next(self.job), (src, out.store_spec))

    def loaded(self, hits, spec):
        dst = self.GPU(list(range(hits)), group_sizes=(hits,), block_indices=(0,))
        run_handler(self.load, next(self.job), (spec, dst))


def replay(manager, hashes, worker=None):
    """One pass of the workload on a fresh manager, as the scheduler drives
    it; per-request ns, per-call ns lists, hit blocks, evicted blocks."""
    islice = itertools.islice
    now = time.perf_counter_ns
    per_req = []
    calls = {"touch+lookup": [], "prepare_load": [], "complete_load": [],
             "prepare_store": [], "touch+complete_store": []}
    hit_blocks = evicted = refused = 0
    gc.collect()
    gc.disable()
    try:
        for h in hashes:
            a1 = islice(h, 0, None, 1)
            a2 = islice(h, 0, None, 1)
            t0 = now()
            manager.touch(a1)
            hits = manager.lookup(a2)
            t1 = now()
            ns = t1 - t0
            calls["touch+lookup"].append(ns)
            if hits is None:
                die(f"{type(manager).__name__}.lookup returned None (retry later)")
            hit_blocks += hits
            if hits:
                a = islice(h, 0, hits, 1)
                t0 = now()
                spec = manager.prepare_load(a)
                t1 = now()
                calls["prepare_load"].append(t1 - t0)
                ns += t1 - t0
                if worker:
                    worker.loaded(hits, spec)
                loaded = set(islice(h, 0, hits, 1))
                t0 = now()
                manager.complete_load(loaded)
                t1 = now()
                calls["complete_load"].append(t1 - t0)
                ns += t1 - t0
            a = islice(h, hits, len(h), 1)
            t0 = now()
            out = manager.prepare_store(a)
            t1 = now()
            calls["prepare_store"].append(t1 - t0)
            ns += t1 - t0
            if out is None:
                refused += 1
            elif out.block_hashes_to_store:
                evicted += len(out.block_hashes_evicted)
                if worker:
                    worker.stored(hits, out)
                to_store = set(out.block_hashes_to_store)
                a = islice(h, 0, len(h), 1)
                t0 = now()
                manager.touch(a)
                manager.complete_store(to_store)
                t1 = now()
                calls["touch+complete_store"].append(t1 - t0)
                ns += t1 - t0
            per_req.append(ns)
    finally:
        gc.enable()
    return {"per_req_ns": per_req, "calls_ns": calls, "hit_blocks": hit_blocks,
            "evicted_blocks": evicted, "refused_stores": refused}


def kvd_books(k, res):
    """After a kvd pass: kvd's own eviction count (its manager reports
    none: kvd evicts by itself), the roots of its prefix tree (kvctl
    lists at most 1024) and `kvctl check` of its books."""
    ns = k.kvctl("--json", "prefix")["namespaces"]
    res["evicted_blocks"] = sum(n["evictions"] for n in ns)
    res["tree_roots"] = len(k.kvctl("--json", "prefix", "--tree", "--depth", "0")["tree"])
    r = k.kvctl("check", check=False)
    if r.returncode:
        die(f"kvctl check after a pass: {r.stdout}{r.stderr}")


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def summarize(passes, total_tokens):
    def med(f):
        return statistics.median(f(p) for p in passes)
    out = {
        "mean_ns": med(lambda p: statistics.fmean(p["per_req_ns"])),
        "p50_ns": med(lambda p: pct(p["per_req_ns"], 50)),
        "p99_ns": med(lambda p: pct(p["per_req_ns"], 99)),
        "hit_token_frac": med(lambda p: p["hit_blocks"] * BLOCK_TOKENS / total_tokens),
        "evicted_blocks": med(lambda p: p["evicted_blocks"]),
        "tree_roots": med(lambda p: p.get("tree_roots", 0)),
        "refused_stores": med(lambda p: p["refused_stores"]),
        "pass_means_ns": [statistics.fmean(p["per_req_ns"]) for p in passes],
        "calls": {},
    }
    for name in passes[0]["calls_ns"]:
        if all(p["calls_ns"][name] for p in passes):
            out["calls"][name] = {
                "p50_ns": med(lambda p: pct(p["calls_ns"][name], 50)),
                "p99_ns": med(lambda p: pct(p["calls_ns"][name], 99)),
                "n": len(passes[0]["calls_ns"][name])}
    return out


# --------------------------------------------------------------- handlers
def run_handler(handler, job, spec):
    t0 = time.perf_counter_ns()
    if not handler.transfer_async(job, spec):
        die(f"{type(handler).__name__}.transfer_async({job}) refused the transfer")
    handler.wait({job})
    t1 = time.perf_counter_ns()
    done = {r.job_id: r for r in handler.get_finished()}
    if job not in done or not done[job].success:
        die(f"{type(handler).__name__}: job {job} not reported finished and "
            f"successful after wait(): {list(done.values())}")
    return t1 - t0


def gbps(nbytes, ns):
    return nbytes / ns if ns else float("inf")     # bytes/ns == GB/s


def bench_copy(nbytes, reps):
    """The baselines: one contiguous buffer of nbytes, torch copy_ and
    ctypes.memmove, each after one untimed copy."""
    import torch
    src = torch.randint(-128, 127, (nbytes,), dtype=torch.int8)
    dst = torch.empty_like(src)
    res = {}
    dst.copy_(src)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        dst.copy_(src)
        ts.append(time.perf_counter_ns() - t0)
    res["torch_copy"] = statistics.median(gbps(nbytes, t) for t in ts)
    d, s = dst.data_ptr(), src.data_ptr()
    ctypes.memmove(d, s, nbytes)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        ctypes.memmove(d, s, nbytes)
        ts.append(time.perf_counter_ns() - t0)
    res["memmove"] = statistics.median(gbps(nbytes, t) for t in ts)
    return res


def bench_handlers(args, vllm_shim, kvd_vllm, extra, kcfg, page):
    """kvd's store and load handlers: --transfer-reps copies each way of
    --transfer-blocks blocks, and the memcpy baselines of as many bytes."""
    import torch
    from vllm.v1.kv_offload.mediums import GPULoadStoreSpec

    n, nt = args.transfer_blocks, args.tensors
    g = torch.Generator().manual_seed(1)
    tensors = [torch.randint(-128, 127, (args.gpu_blocks, page), dtype=torch.int8,
                             generator=g) for _ in range(nt)]
    sched = kvd_vllm.KvdOffloadingSpec(vllm_config(vllm_shim, extra), kcfg)
    worker = kvd_vllm.KvdOffloadingSpec(vllm_config(vllm_shim, extra), kcfg)
    manager = sched.get_manager()
    store, load = handler_pair(worker, tensors, page)

    rng = random.Random(2)
    ids = rng.sample(range(args.gpu_blocks), 2 * n)
    src_ids, dst_ids = ids[:n], ids[n:]
    hashes = [rng.randbytes(32) for _ in range(n)]
    out = manager.prepare_store(iter(hashes))
    if out is None or len(out.block_hashes_to_store) != n:
        die(f"prepare_store of {n} new blocks gave {out}")
    nbytes = n * nt * page
    job = itertools.count(1)
    res = {"bytes": nbytes, "store_gbps": [], "load_gbps": []}

    spec = (GPULoadStoreSpec(src_ids, group_sizes=(n,)), out.store_spec)
    run_handler(store, next(job), spec)                 # untimed
    for _ in range(args.transfer_reps):
        res["store_gbps"].append(gbps(nbytes, run_handler(store, next(job), spec)))
    manager.touch(iter(hashes))
    manager.complete_store(set(hashes))

    hits = manager.lookup(iter(hashes))
    if hits != n:
        die(f"lookup of the {n} blocks just stored hit {hits}")
    dst = GPULoadStoreSpec(dst_ids, group_sizes=(n,), block_indices=(0,))
    spec = (manager.prepare_load(iter(hashes)), dst)
    run_handler(load, next(job), spec)                  # untimed
    for _ in range(args.transfer_reps):
        res["load_gbps"].append(gbps(nbytes, run_handler(load, next(job), spec)))
    manager.complete_load(set(hashes))

    bad = [i for i, t in enumerate(tensors) if not torch.equal(t[dst_ids], t[src_ids])]
    if bad:
        die(f"the loaded blocks differ from the stored ones in tensors {bad}")
    close_spec(worker)
    close_spec(sched)
    # The same scattered blocks, copied one page at a time with torch's
    # copy_ into a plain tensor of kvd-sized blocks: what a copy loop
    # costs here (an untimed copy first).
    pool = torch.empty((n, nt * page), dtype=torch.int8)
    pairs = list(enumerate(src_ids))

    def per_block():
        t0 = time.perf_counter_ns()
        for j, gid in pairs:
            for i, t in enumerate(tensors):
                pool[j, i * page:(i + 1) * page].copy_(t[gid])
        return time.perf_counter_ns() - t0
    per_block()
    res["per_block_copy"] = statistics.median(
        gbps(nbytes, per_block()) for _ in range(args.transfer_reps))
    res["store"] = statistics.median(res["store_gbps"])
    res["load"] = statistics.median(res["load_gbps"])
    res.update(bench_copy(nbytes, args.transfer_reps))
    return res


# ------------------------------------------------------------------- main
def fmt_ns(ns):
    return f"{ns / 1000:.1f} us" if ns >= 1000 else f"{ns:.0f} ns"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vendor", default=(os.environ.get("KVD_VLLM_VENDOR")
                                         or os.path.join(SHARED, "vendor")),
                    help="the vendored sources (vllm_shim.py, vllm-v0.19.0/)")
    ap.add_argument("--workload", default=os.path.join(SHARED, "bench",
                                                       "shared_prompts.kvdtrc"),
                    help="the kvdtrc request stream (default: shared_prompts)")
    ap.add_argument("--json", default=os.path.join(BUILD, "bench-vllm.json"),
                    help="the JSON report (default $O/bench-vllm.json)")
    ap.add_argument("--blocks", type=int, default=16384,
                    help="blocks each manager holds (default 16384)")
    ap.add_argument("--passes", type=int, default=3,
                    help="workload passes per manager (default 3)")
    ap.add_argument("--tensors", type=int, default=4,
                    help="canonical KV tensors (layers), 64 KiB pages (default 4)")
    ap.add_argument("--gpu-blocks", type=int, default=1024,
                    help="blocks of each stand-in GPU tensor (default 1024)")
    ap.add_argument("--transfer-blocks", type=int, default=512,
                    help="blocks per handler transfer (default 512)")
    ap.add_argument("--transfer-reps", type=int, default=10,
                    help="timed transfers each way (default 10)")
    ap.add_argument("--skip-handlers", action="store_true",
                    help="part 1 only")
    ap.add_argument("--kvd-arg", dest="kvd_args", action="append", default=[],
                    help="an option for part 1's kvd (repeat), e.g. --kvd-arg=--poll-us=1000")
    args = ap.parse_args()
    sys.dont_write_bytecode = True      # nothing written into the tree
    if args.gpu_blocks < 2 * args.transfer_blocks:
        die("--gpu-blocks must be at least twice --transfer-blocks")

    print("command: " + " ".join(shlex.quote(a) for a in [sys.executable] + sys.argv))
    print(f"machine: {os.cpu_count()} cores ({platform.machine()}, "
          f"{platform.python_implementation()} {platform.python_version()})")
    if (os.cpu_count() or 1) <= 2:
        print("warning: a 2-vCPU machine: its figures move between runs by tens "
              "of percent; compare the ratios of one run")

    if not os.path.isfile(os.path.join(args.vendor, "vllm_shim.py")):
        skip(f"{args.vendor}/vllm_shim.py is absent: the vendored vLLM v0.19.0 "
             "sources are needed (--vendor DIR)")
    if not os.path.isfile(args.workload):
        skip(f"{args.workload} is absent: the shared_prompts workload is needed "
             "(--workload FILE)")
    for f in ("kvd", "kvctl"):
        if not os.access(os.path.join(BUILD, f), os.X_OK):
            die(f"{BUILD}/{f} is not built: run make")
    sys.path.insert(0, args.vendor)
    import vllm_shim
    vllm_shim.install(os.path.join(args.vendor, "vllm-v0.19.0"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from kvdtest import Kvd             # puts $O/python first on sys.path
    try:
        import kvd
        import kvd.vllm as kvd_vllm
    except ImportError as e:
        die(f"cannot import kvd.vllm from {BUILD}/python ({e}): run make")
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
    import logging
    # OffloadingSpec warns at every spec made that its API is experimental.
    logging.getLogger("vllm.v1.kv_offload.spec").setLevel(logging.ERROR)
    logging.getLogger("vllm.kvd").setLevel(logging.WARNING)    # its "connected"

    t = time.perf_counter()
    reqs, bs = read_kvdtrc(args.workload)
    if bs != BLOCK_TOKENS:
        die(f"{args.workload}: block size {bs}, this benchmark's is {BLOCK_TOKENS}")
    hashes = vllm_hashes(reqs, bs)
    total_tokens = sum(len(r[2]) for r in reqs)
    print(f"workload: {args.workload}: {len(reqs)} requests, {total_tokens} tokens, "
          f"{sum(map(len, hashes))} full blocks, "
          f"{len(set(itertools.chain.from_iterable(hashes)))} distinct; "
          f"hashed by vLLM (sha256) in {time.perf_counter() - t:.2f} s")

    # Part 1's pages: what a manager does is the same for any page size,
    # and the worker's copies (untimed) stay small: 256-byte pages.
    max_len = max(map(len, hashes))
    mcfg, mpage = kv_cache_config(1, max_len, kv_heads=1, head_dim=4)
    probe = kvd_vllm.KvdOffloadingSpec(
        vllm_config(vllm_shim, {"kvd_socket": "/nonexistent"}), mcfg)
    cpu_bytes = args.blocks * mpage             # CPUOffloadingSpec: page x tensors
    probe_block_bytes = probe.layout.block_bytes
    cpu_passes, kvd_passes = [], []
    kvd_max_blocks = None
    t = time.perf_counter()
    with Kvd(pool_for(probe_block_bytes, args.blocks), *args.kvd_args) as k:
        extra = {"kvd_socket": k.socket, "kvd_layout": "bench"}
        for i in range(args.passes):
            m = CPUOffloadingSpec(vllm_config(vllm_shim, {"cpu_bytes_to_use": cpu_bytes}),
                                  mcfg).get_manager()
            if m._num_blocks != args.blocks:
                die(f"CPUOffloadingManager holds {m._num_blocks} blocks, not {args.blocks}")
            cpu_passes.append(replay(m, hashes))
            del m
            if i:
                k.restart()                     # an empty kvd for each pass
            sched = kvd_vllm.KvdOffloadingSpec(vllm_config(vllm_shim, extra), mcfg)
            wspec = kvd_vllm.KvdOffloadingSpec(vllm_config(vllm_shim, extra), mcfg)
            m = sched.get_manager()
            c = m.client() if hasattr(m, "client") else None
            kvd_max_blocks = c.max_blocks if c is not None else None
            if kvd_max_blocks is not None and kvd_max_blocks != args.blocks:
                die(f"kvd's pool holds {kvd_max_blocks} blocks of the namespace, "
                    f"not {args.blocks}")
            kvd_passes.append(replay(m, hashes, Worker(wspec, 1, max_len, mpage)))
            kvd_books(k, kvd_passes[-1])
            close_spec(wspec)
            close_spec(sched)
            del m, c, sched, wspec
    print(f"managers: {args.passes} passes each of {len(reqs)} requests in "
          f"{time.perf_counter() - t:.1f} s")

    hres = None
    if not args.skip_handlers:
        t = time.perf_counter()
        kcfg, page = kv_cache_config(args.tensors, args.gpu_blocks)
        probe = kvd_vllm.KvdOffloadingSpec(
            vllm_config(vllm_shim, {"kvd_socket": "/nonexistent"}), kcfg)
        hblock = probe.layout.block_bytes
        with Kvd(pool_for(hblock, args.transfer_blocks)) as k:
            extra = {"kvd_socket": k.socket, "kvd_layout": "bench"}
            hres = bench_handlers(args, vllm_shim, kvd_vllm, extra, kcfg, page)
        hres["kvd_block_bytes"] = hblock
        hres["page"] = page
        print(f"handlers: {args.transfer_reps} transfers each way in "
              f"{time.perf_counter() - t:.1f} s")

    cs, ks = summarize(cpu_passes, total_tokens), summarize(kvd_passes, total_tokens)
    rows = [("metric", "kvd", "vLLM CPU / memcpy", "ratio")]
    for key, name in (("mean_ns", "manager per request, mean"),
                      ("p50_ns", "manager per request, p50"),
                      ("p99_ns", "manager per request, p99")):
        rows.append((name, fmt_ns(ks[key]), fmt_ns(cs[key]),
                     f"{ks[key] / cs[key]:.2f}x vLLM's time"))
    agree = "agree" if abs(ks["hit_token_frac"] - cs["hit_token_frac"]) < 1e-9 else "DIFFER"
    rows.append(("hit tokens", f"{ks['hit_token_frac']:.3f}", f"{cs['hit_token_frac']:.3f}",
                 agree))
    rows.append(("blocks evicted per pass", f"{ks['evicted_blocks']:.0f}",
                 f"{cs['evicted_blocks']:.0f}", "kvd: kvctl prefix"))
    n_prompts = len({r[1] for r in reqs})
    roots = ks["tree_roots"]
    rows.append(("kvd prefix tree roots after a pass",
                 f"{roots:.0f}" + ("+" if roots >= 1024 else ""), "",
                 f"{n_prompts} expected (the prompts)"))
    for name in ks["calls"]:
        if name in cs["calls"]:
            a, b = ks["calls"][name]["p50_ns"], cs["calls"][name]["p50_ns"]
            rows.append((f"  {name} p50", fmt_ns(a), fmt_ns(b), f"{a / b:.2f}x"))
    if hres:
        mib = hres["bytes"] >> 20
        for d in ("store", "load"):
            rows.append((f"{d} handler, {args.transfer_blocks} blocks ({mib} MiB)",
                         f"{hres[d]:.2f} GB/s", f"{hres['torch_copy']:.2f} GB/s copy_",
                         f"{hres[d] / hres['torch_copy']:.2f}x copy_, "
                         f"{hres[d] / hres['memmove']:.2f}x memmove"))
        rows.append(("memmove of the same bytes", "", f"{hres['memmove']:.2f} GB/s", ""))
        rows.append(("torch copy_ page by page, same blocks", "",
                     f"{hres['per_block_copy']:.2f} GB/s",
                     f"store {hres['store'] / hres['per_block_copy']:.2f}x this"))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    print()
    for j, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |")
        if j == 0:
            print("| " + " | ".join("-" * w[i] for i in range(4)) + " |")
    if ks["refused_stores"] or cs["refused_stores"]:
        print(f"note: prepare_store refused: kvd {ks['refused_stores']}, "
              f"vLLM {cs['refused_stores']} per pass")

    rep = {
        "bench": "vllm", "version": getattr(kvd, "VERSION", None),
        "argv": sys.argv, "cores": os.cpu_count(),
        "workload": os.path.abspath(args.workload), "requests": len(reqs),
        "tokens": total_tokens, "blocks": args.blocks, "kvd_max_blocks": kvd_max_blocks,
        "passes": args.passes, "manager_page_bytes": mpage,
        "manager_kvd_block_bytes": probe_block_bytes,
        "manager": {"kvd": ks, "vllm_cpu": cs,
                    "ratio_mean": ks["mean_ns"] / cs["mean_ns"],
                    "ratio_p50": ks["p50_ns"] / cs["p50_ns"],
                    "ratio_p99": ks["p99_ns"] / cs["p99_ns"]},
    }
    if hres:
        rep["handlers"] = {
            "transfer_blocks": args.transfer_blocks, "tensors": args.tensors,
            "page_bytes": hres["page"], "kvd_block_bytes": hres["kvd_block_bytes"],
            "bytes": hres["bytes"], "reps": args.transfer_reps,
            "store_gbps": hres["store"], "load_gbps": hres["load"],
            "store_gbps_all": hres["store_gbps"], "load_gbps_all": hres["load_gbps"],
            "torch_copy_gbps": hres["torch_copy"], "memmove_gbps": hres["memmove"],
            "per_block_copy_gbps": hres["per_block_copy"],
            "store_ratio_copy": hres["store"] / hres["torch_copy"],
            "load_ratio_copy": hres["load"] / hres["torch_copy"]}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(rep, f, indent=1)
        f.write("\n")
    print(f"\nJSON report: {args.json}")


if __name__ == "__main__":
    main()
