# SPDX-License-Identifier: MIT
"""kvd: Python engines on kvd's shared KV-cache pool (kvd-python(7)).

A thin layer over libkvclient's CPython binding (kvd._kvd): no second
implementation of the protocol. Every call of a Client is one
libkvclient call, releases the GIL while it waits for kvd, and raises
kvd.Error (an OSError: .errno and kvd's reason) when it fails.

    import kvd
    with kvd.Client("llama-3-8b", layers=32, kv_heads=8, head_dim=128,
                    block_tokens=16, dtype="bf16") as c:
        ids = c.alloc(4)                      # block ids, one ref each
        mem = c.pool_memory()                 # the pool: a memoryview (host)
        hashes = kvd.hash_blocks(tokens, c.block_tokens)
        hits = c.lookup(hashes)               # prefix hit: ids with refs
        c.release(ids + hits)

kvd.vllm is the vLLM offloading plug-in built on it (KvdOffloadingSpec).
"""
from kvd._kvd import (ABI_MAJOR, ABI_MINOR, OPAQUE_RUN_MAX, PIN_MAX_MS,
                      PRIO_DEFAULT, PRIO_MAX, VERSION, Client, CudaMemory,
                      Error, HostMemory, Seq, hash_blocks)

__all__ = ["ABI_MAJOR", "ABI_MINOR", "OPAQUE_RUN_MAX", "PIN_MAX_MS",
           "PRIO_DEFAULT", "PRIO_MAX", "VERSION", "Client", "CudaMemory",
           "Error", "HostMemory", "Seq", "hash_blocks", "opaque_geometry",
           "ROOT_HASH"]
__version__ = VERSION

# The parent of a sequence's first block (kv_hash_blocks(3)).
ROOT_HASH = bytes(16)


def opaque_geometry(runs, run_bytes, block_tokens):
    """The Client keyword arguments of an opaque namespace.

    A block of an opaque namespace is `runs` runs of `run_bytes` bytes
    that kvd does not interpret (another engine's layout: vLLM's
    canonical KV tensors, one run per tensor and rank), covering
    `block_tokens` tokens. runs * run_bytes must be a multiple of 256;
    runs and block_tokens are at most 1024, run_bytes at most
    OPAQUE_RUN_MAX (1 GiB). kvd refuses anything else with EINVAL.
    """
    return {"layers": int(runs), "kv_heads": 1, "head_dim": int(run_bytes),
            "block_tokens": int(block_tokens), "dtype": "opaque"}
