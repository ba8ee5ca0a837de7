# SPDX-License-Identifier: MIT
"""KvdOffloadingSpec as vLLM v0.19 loads it, and its handlers' copies.

- vLLM's real OffloadingSpecFactory (and the real scheduler-side
  OffloadingConnector) load KvdOffloadingSpec from spec_module_path
  "kvd.vllm", the import path being build/python;
- the namespace: model id and revision derived from the configuration,
  different for every layout difference, the opaque geometry kvd shows;
- the handlers: GPU -> KVD -> GPU round trips of CPU tensors standing in
  for GPU memory, byte for byte: plain and FlashAttention-split canonical
  tensors, block_size_factor 2 with a load that starts inside an offloaded
  block, two ranks of one block; and the jobs that cannot be done (ids -1,
  a kvd run that is over).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kvdtest import BUILD, Kvd, need_vllm  # noqa: E402

shim = need_vllm()
if not os.path.exists(os.path.join(BUILD, "python", "kvd", "vllm.py")):
    print("SKIP: the kvd Python package is not built (python3-dev)", file=sys.stderr)
    sys.exit(77)
import pytest  # noqa: E402
import torch  # noqa: E402

import kvd  # noqa: E402
import kvd.vllm as kv  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (  # noqa: E402
    OffloadingConnector)
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,  # noqa: E402
                                        KVCacheGroupSpec, KVCacheTensor)
from vllm.v1.kv_offload.factory import OffloadingSpecFactory  # noqa: E402
from vllm.v1.kv_offload.mediums import GPULoadStoreSpec  # noqa: E402
from vllm.v1.kv_offload.spec import CanonicalKVCaches, CanonicalKVCacheTensor  # noqa: E402

LAYERS, GPU_BLOCKS, BS = 3, 24, 16


def kv_config(layers=LAYERS, heads=2, dtype=torch.float16):
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=heads, head_size=64, dtype=dtype)
    names = [f"layer.{i}" for i in range(layers)]
    return KVCacheConfig(
        num_blocks=GPU_BLOCKS,
        kv_cache_tensors=[KVCacheTensor(size=GPU_BLOCKS * spec.page_size_bytes,
                                        shared_by=[n]) for n in names],
        kv_cache_groups=[KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec)])


def vllm_config(k=None, model="org/test-model", world_size=1, events=False, **extra):
    extra = dict(spec_name="KvdOffloadingSpec", spec_module_path="kvd.vllm", **extra)
    if k is not None:
        extra["kvd_socket"] = k.socket
    cfg = shim.make_vllm_config(extra, block_size=BS, world_size=world_size,
                                enable_kv_cache_events=events)
    cfg.model_config = shim.SimpleNamespace(model=model, revision=None)
    return cfg


def make_spec(k=None, kvcfg=None, **kw):
    return OffloadingSpecFactory.create_spec(vllm_config(k, **kw), kvcfg or kv_config())


@pytest.fixture(scope="module")
def k():
    with Kvd(pool="64M") as k:
        yield k
        assert k.kvctl("check", check=False).returncode == 0, k.tail()


def test_factory_loads_the_spec():
    spec = make_spec()
    assert type(spec) is kv.KvdOffloadingSpec
    assert kv.__file__ == os.path.join(BUILD, "python", "kvd", "vllm.py")
    page = kv_config().kv_cache_groups[0].kv_cache_spec.page_size_bytes
    assert spec.layout.geometry() == dict(layers=LAYERS, kv_heads=1, head_dim=page,
                                          block_tokens=BS, dtype="opaque",
                                          tp_size=1, tp_rank=0)


def test_namespace_key():
    base = make_spec()
    assert base.model_id == "org/test-model"
    assert base.model_rev.startswith("L") and len(base.model_rev) == 25
    assert make_spec().model_rev == base.model_rev
    others = [make_spec(world_size=2), make_spec(kvd_layout="FLASHINFER"),
              make_spec(block_size=2 * BS), make_spec(kvcfg=kv_config(layers=4)),
              make_spec(kvcfg=kv_config(dtype=torch.bfloat16)),
              make_spec(kvcfg=kv_config(heads=4))]
    revs = {s.model_rev for s in others}
    assert len(revs) == len(others) and base.model_rev not in revs
    long = make_spec(model="x" * 80)
    assert len(long.model_id) == 63 and long.model_id.startswith("x" * 46 + "-")
    assert make_spec(kvd_model_id="served").model_id == "served"


def test_geometry_limits():
    with pytest.raises(ValueError):
        make_spec(block_size=BS * 128)                      # 2048-token blocks
    lay = kv.KvdBlockLayout.build(8, 200, 4096, 16)         # 1600 runs: one per rank
    assert lay.geometry()["layers"] == 8 and lay.block_bytes == 8 * 200 * 4096


def test_scheduler_connector_and_namespace(k):
    cfg = vllm_config(k)
    conn = OffloadingConnector(cfg, KVConnectorRole.SCHEDULER, kv_config())
    manager = conn.connector_scheduler.manager
    assert isinstance(manager, kv.KvdOffloadingManager)
    spec = make_spec(k)
    ns = [n for n in k.kvctl("status", "--json")["namespaces"]
          if n["model"] == spec.model_id]
    assert len(ns) == 1
    assert ns[0]["rev"] == spec.model_rev and ns[0]["dtype"] == "opaque"
    assert ns[0]["layers"] == LAYERS and ns[0]["block_tokens"] == BS
    assert manager.events is None
    manager.close()
    filtered = make_spec(k, store_threshold=2).get_manager()
    assert type(filtered).__name__ == "FilterReusedOffloadingManager"
    assert make_spec(k, events=True).get_manager().events == []


def test_refused_namespace_is_an_error():
    big = kv_config(layers=40, heads=64)                    # 10 MiB blocks
    with Kvd(pool="8M") as small:
        with pytest.raises(RuntimeError, match="refused"):
            make_spec(small, kvcfg=big).get_manager()
    spec = make_spec(None, kvd_socket="/nonexistent/kvd.sock")
    assert spec.get_manager().lookup([b"x" * 32]) == 0      # kvd not there: later


# ------------------------------------------------------------------ handlers
def gpu_tensors(n, page, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(-128, 127, (GPU_BLOCKS, page), dtype=torch.int8, generator=g)
            for _ in range(n)]


def canonical(tensors):
    return CanonicalKVCaches(
        tensors=[CanonicalKVCacheTensor(tensor=t, page_size_bytes=t.shape[1])
                 for t in tensors], group_data_refs=[[]])


def handlers(spec, tensors):
    got = {(s.medium(), d.medium()): h for s, d, h in spec.get_handlers(canonical(tensors))}
    return got[("GPU", "KVD")], got[("KVD", "GPU")]


def run(handler, job, spec):
    assert handler.transfer_async(job, spec)
    handler.wait({job})
    res = handler.get_finished()
    assert [r.job_id for r in res] == [job]
    return res[0]


def store_blocks(manager, hashes):
    out = manager.prepare_store(hashes)
    assert out.block_hashes_to_store == hashes
    return out.store_spec


def use_path(handler, path):
    """Send a handler down the cuda backends' copy paths, on CPU tensors:
    "staged" (GPU tensors, host pool: through a host buffer), "device" (a
    device pool: torch gathers and scatters); "host" is the host path."""
    if path == "staged":
        handler.staged = True
    elif path == "device":
        handler._copy = lambda b, ks, gs, skip: handler._copy_device(
            b, ks.block_ids, gs.block_ids, skip)
    return handler


@pytest.mark.parametrize("split,factor,path", [
    (False, 1, "host"), (True, 1, "host"), (False, 2, "host"), (True, 2, "host"),
    (True, 2, "staged"), (True, 2, "device")])
def test_round_trip(k, split, factor, path):
    extra = {"block_size": BS * factor} if factor > 1 else {}
    model = f"rt-{split}-{factor}-{path}"
    spec = make_spec(k, model=model, **extra)
    page = spec.kv_cache_config.kv_cache_groups[0].kv_cache_spec.page_size_bytes
    n, p = (2 * LAYERS, page // 2) if split else (LAYERS, page)
    src, dst = gpu_tensors(n, p, 1), gpu_tensors(n, p, 2)
    store = use_path(handlers(spec, src)[0], path)
    m = spec.get_manager()
    hashes = [bytes([factor, split, i]) * 11 for i in range(3)]
    kspec = store_blocks(m, hashes)
    gpu_ids = [5, 9, 2, 17, 11, 3][:3 * factor]
    r = run(store, 1, (GPULoadStoreSpec(gpu_ids, group_sizes=(len(gpu_ids),)), kspec))
    assert r.success and r.transfer_size == len(gpu_ids) * n * p
    assert r.transfer_type == ("GPU", "KVD") and r.transfer_time >= 0
    m.complete_store(hashes)

    spec2 = make_spec(k, model=model, **extra)          # another engine
    load = use_path(handlers(spec2, dst)[1], path)
    m2 = spec2.get_manager()
    assert m2.lookup(hashes) == 3
    lspec = m2.prepare_load(hashes)
    skip = factor - 1                                   # starts inside block 0
    to = [20, 1, 7, 13, 0, 22][:3 * factor - skip]
    r = run(load, 2, (lspec, GPULoadStoreSpec(to, group_sizes=(len(to),),
                                              block_indices=(skip,))))
    assert r.success and r.transfer_size == len(to) * n * p
    for s, d in zip(src, dst):
        assert torch.equal(d[to], s[gpu_ids[skip:]])
    untouched = [i for i in range(GPU_BLOCKS) if i not in to]
    assert torch.equal(dst[0][untouched], gpu_tensors(n, p, 2)[0][untouched])
    m2.complete_load(hashes)
    m.close()
    m2.close()


def test_two_ranks_share_a_block(k):
    page = kv_config().kv_cache_groups[0].kv_cache_spec.page_size_bytes
    specs = [make_spec(k, model="tp2", world_size=2) for _ in range(2)]
    for r, s in enumerate(specs):
        s.worker_rank = lambda r=r: r
    src = [gpu_tensors(LAYERS, page, 10 + r) for r in range(2)]
    m = specs[0].get_manager()
    hashes = [b"r" * 32]
    kspec = store_blocks(m, hashes)
    for r in range(2):
        store, _ = handlers(specs[r], src[r])
        assert run(store, r, (GPULoadStoreSpec([4], group_sizes=(1,)), kspec)).success
    m.complete_store(hashes)
    with kvd.Client(specs[0].model_id, socket_path=k.socket,
                    model_rev=specs[0].model_rev, **specs[0].layout.geometry()) as c:
        assert c.block_bytes == 2 * LAYERS * page
        ids = c.lookup([h[:16] for h in hashes])
        mem = bytes(c.block_memory(ids[0]))
        want = b"".join(bytes(t[4].view(torch.uint8).numpy()) for r in range(2)
                        for t in src[r])
        assert mem == want                              # rank 0's bytes, then rank 1's
        c.release(ids)
    m.close()


def test_canonical_tensors_must_fit(k):
    spec = make_spec(k, model="fit")
    page = spec.kv_cache_config.kv_cache_groups[0].kv_cache_spec.page_size_bytes
    with pytest.raises(ValueError, match="disagree"):
        handlers(spec, gpu_tensors(LAYERS + 1, page, 3))
    with pytest.raises(ValueError, match="missing"):
        handlers(spec, gpu_tensors(LAYERS - 1, page, 3))


def test_jobs_that_cannot_be_done(k):
    spec = make_spec(k, model="fail")
    page = spec.kv_cache_config.kv_cache_groups[0].kv_cache_spec.page_size_bytes
    store, load = handlers(spec, gpu_tensors(LAYERS, page, 4))
    m = spec.get_manager()
    lost = m.prepare_load([b"?" * 32])
    assert list(lost.block_ids) == [-1]
    dst = GPULoadStoreSpec([0], group_sizes=(1,), block_indices=(0,))
    assert not run(load, 1, (lost, dst)).success        # vLLM asserts on it
    kspec = store_blocks(m, [b"s" * 32])
    k.restart()                                          # that kvd run is over
    r = run(store, 2, (GPULoadStoreSpec([0], group_sizes=(1,)), kspec))
    assert r.success                                     # written nowhere that counts
    m.complete_store([b"s" * 32])
    m._retry_at = 0
    assert m.lookup([b"s" * 32]) == 0
    m.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
