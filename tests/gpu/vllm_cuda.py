# SPDX-License-Identifier: MIT
"""The Python package's cuda path on a GPU host (tests/gpu/run.sh).

    python3 vllm_cuda.py SOCKET [VENDOR]

against a kvd on the cuda backend at SOCKET:
  1. the binding: pool_memory() is device memory (__cuda_array_interface__)
     that torch takes without a copy; blocks a process writes there with
     torch are read back, byte for byte, by another process's Client;
  2. kvd.vllm's handlers on CUDA KV tensors (vLLM's canonical int8
     tensors), device copies on a stream of their own: a store by one
     engine, then a load by another into zeroed tensors, equal bytes,
     with block_size_factor 1 and 2 (a load that starts inside a block).
Prints PASS/FAIL per check; exit 0 all passed, 1 one failed, 77 when it
cannot run here (no torch with CUDA, the extension not built for this
python, no vendored vLLM for part 2), with the reason.
"""
import multiprocessing as mp
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def skip(why):
    print(f"SKIP  kvd Python package on the GPU: {why}")
    sys.exit(77)


def find_package():
    """The kvd package: the bundle's python/, else the tree's build/python."""
    for d in (os.path.join(HERE, "..", "python"),
              os.path.join(HERE, "..", "..", os.environ.get("O", "build"), "python")):
        if os.path.isdir(os.path.join(d, "kvd")):
            sys.path.insert(0, os.path.abspath(d))
            return
    skip("no build/python/kvd (built with python3-dev)")


fails = 0


def check(ok, what):
    global fails
    print(("PASS  " if ok else "FAIL  ") + what, flush=True)
    fails += not ok


def reader(sock, ids, q):
    import kvd
    import torch
    with kvd.Client("gpu-py", socket_path=sock, layers=2, kv_heads=2,
                    head_dim=64, block_tokens=16) as c:
        c.block_addrs(ids)
        dev = torch.device("cuda", c.pool_info()["device"])
        pool = torch.as_tensor(c.pool_memory(), device=dev)
        q.put([int(pool[i * c.block_bytes:(i + 1) * c.block_bytes].sum().item())
               for i in ids])
        del pool


def part1(sock):
    import kvd
    import torch
    with kvd.Client("gpu-py", socket_path=sock, layers=2, kv_heads=2,
                    head_dim=64, block_tokens=16) as c:
        mem = c.pool_memory()
        cai = getattr(mem, "__cuda_array_interface__", None)
        check(c.backend == "cuda" and cai and cai["shape"] == (c.pool_bytes,),
              "pool_memory() on cuda: __cuda_array_interface__ over the pool")
        ids = c.alloc(3)
        c.block_addrs(ids)
        dev = torch.device("cuda", c.pool_info()["device"])
        pool = torch.as_tensor(mem, device=dev)
        check(pool.data_ptr() == mem.ptr, "torch.as_tensor takes it without a copy")
        for n, i in enumerate(ids):
            pool[i * c.block_bytes:(i + 1) * c.block_bytes] = n + 1
        torch.cuda.synchronize(dev)
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=reader, args=(sock, ids, q))
        p.start()
        sums = q.get(timeout=120)
        p.join(60)
        check(sums == [(n + 1) * c.block_bytes for n in range(3)],
              "another process reads the bytes torch wrote, through its own mapping")
        c.release(ids)
        del pool, mem


def part2(sock, vendor):
    sys.path.insert(0, vendor)
    import vllm_shim
    vllm_shim.install()
    import torch
    from types import SimpleNamespace
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                            KVCacheGroupSpec, KVCacheTensor)
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.mediums import GPULoadStoreSpec
    from vllm.v1.kv_offload.spec import CanonicalKVCaches, CanonicalKVCacheTensor

    bs, layers, nblocks = 16, 4, 64
    kspec = FullAttentionSpec(block_size=bs, num_kv_heads=8, head_size=128,
                              dtype=torch.float16)
    names = [f"layer.{i}" for i in range(layers)]
    kvcfg = KVCacheConfig(
        num_blocks=nblocks,
        kv_cache_tensors=[KVCacheTensor(size=nblocks * kspec.page_size_bytes,
                                        shared_by=[n]) for n in names],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=names, kv_cache_spec=kspec)])
    page = kspec.page_size_bytes

    def spec(factor):
        extra = {"spec_name": "KvdOffloadingSpec", "spec_module_path": "kvd.vllm",
                 "kvd_socket": sock}
        if factor > 1:
            extra["block_size"] = bs * factor
        cfg = vllm_shim.make_vllm_config(extra, block_size=bs)
        cfg.model_config = SimpleNamespace(model=f"gpu/vllm-{factor}", revision=None)
        return OffloadingSpecFactory.create_spec(cfg, kvcfg)

    def handlers(s, tensors):
        kv = CanonicalKVCaches(tensors=[CanonicalKVCacheTensor(t, page) for t in tensors],
                               group_data_refs=[[]])
        got = {(a.medium(), b.medium()): h for a, b, h in s.get_handlers(kv)}
        return got[("GPU", "KVD")], got[("KVD", "GPU")]

    def run(h, job, transfer):
        ok = h.transfer_async(job, transfer)
        h.wait({job})
        res = [r for r in h.get_finished() if r.job_id == job]
        return ok and len(res) == 1 and res[0].success

    for factor in (1, 2):
        g = torch.Generator(device="cuda").manual_seed(factor)
        src = [torch.randint(-128, 127, (nblocks, page), dtype=torch.int8,
                             device="cuda", generator=g) for _ in range(layers)]
        dst = [torch.zeros(nblocks, page, dtype=torch.int8, device="cuda")
               for _ in range(layers)]
        a, b = spec(factor), spec(factor)
        store, _ = handlers(a, src)
        _, load = handlers(b, dst)
        hashes = [bytes([factor, i]) * 16 for i in range(4)]
        ma, mb = a.get_manager(), b.get_manager()
        out = ma.prepare_store(hashes)
        gids = list(range(3, 3 + 4 * factor))
        ok = run(store, 1, (GPULoadStoreSpec(gids, group_sizes=(len(gids),)),
                            out.store_spec))
        ma.complete_store(hashes)
        hit = mb.lookup(hashes)
        skip_ = factor - 1
        to = list(range(40, 40 + 4 * factor - skip_))
        ok2 = run(load, 2, (mb.prepare_load(hashes),
                            GPULoadStoreSpec(to, group_sizes=(len(to),),
                                             block_indices=(skip_,))))
        torch.cuda.synchronize()
        same = all(torch.equal(d[to], s[gids[skip_:]]) for s, d in zip(src, dst))
        check(ok and hit == 4 and ok2 and same,
              f"kvd.vllm handlers on CUDA tensors, block_size_factor {factor}: "
              f"store, then another engine's load, equal bytes")
        mb.complete_load(hashes)
        ma.close()
        mb.close()


def main():
    if len(sys.argv) < 2:
        print("usage: vllm_cuda.py SOCKET [VENDOR]", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        skip("no torch for this python")
    if not torch.cuda.is_available():
        skip("torch sees no CUDA device")
    find_package()
    try:
        import kvd  # noqa: F401
    except ImportError as e:
        skip(f"the kvd extension does not load in this python ({e})")
    part1(sys.argv[1])
    vendor = sys.argv[2] if len(sys.argv) > 2 else ""
    if vendor and os.path.isfile(os.path.join(vendor, "vllm_shim.py")):
        part2(sys.argv[1], vendor)
    else:
        print("SKIP  kvd.vllm handlers on CUDA tensors: no vendored vLLM sources")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
