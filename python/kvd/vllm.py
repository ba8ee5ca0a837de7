# SPDX-License-Identifier: MIT
"""kvd.vllm: kvd as a shared KV-cache tier behind stock vLLM (v0.19).

vLLM's OffloadingConnector copies full KV blocks out of GPU memory to an
offloading medium and back. KvdOffloadingSpec makes that medium kvd's
pool: blocks stored by one engine are loaded by every other engine (any
process, any time later) that serves the same model with the same layout,
and they outlive the engine that wrote them. Start kvd, then:

    PYTHONHASHSEED=0 vllm serve MODEL --kv-transfer-config '{
        "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "KvdOffloadingSpec",
                                      "spec_module_path": "kvd.vllm"}}'

Engines must agree on PYTHONHASHSEED (any one value): vLLM seeds its
block hashes with a random value per process unless it is set, and then
no engine ever hits another's blocks (nothing breaks, nothing is shared).

kv_connector_extra_config keys (all optional):

  kvd_socket             kvd's socket (default: $KVD_SOCKET, else kvd's
                         default path)
  kvd_layout             a tag for the KV byte layout, e.g. the attention
                         backend's name; engines with different tags never
                         share blocks (see Namespace)
  kvd_model_id           the model id in kvd (default: vLLM's model name)
  lookup_lease_ms        how long a lookup's hits stay pinned for the load
                         that normally follows it (default 2000)
  touch_refresh_ms       a chain vLLM touches without a lookup (a prompt
                         all in its GPU cache, a request it stores) is
                         refreshed in kvd's LRU (one LOOKUP) unless each
                         of its blocks was hit or committed within this
                         many ms (default 1000)
  kvd_connect_timeout_ms, kvd_call_timeout_ms
                         libkvclient's timeouts (0: its defaults: 10 s to
                         connect, calls wait for ever)
  block_size             offloaded block size in tokens, a multiple of the
                         GPU block size (vLLM's own key, OffloadingSpec)
  store_threshold, max_tracker_size
                         store only blocks looked up that many times
                         (vLLM's FilterReusedOffloadingManager, as for
                         CPUOffloadingSpec)

Namespace. Blocks are opaque bytes in one kvd namespace per (model,
layout): model id = vLLM's model name (above 63 bytes: its first 46, "-"
and 16 hex digits of its SHA-256); model revision = "L" and 24 hex digits
of a SHA-256 over the model's revision, every KV cache group's spec (class,
block_size, num_kv_heads, head_size, dtype, page_size_bytes), the number
of KV cache tensors, the attention backend and cache dtype when the
configuration names them, the world size, block_size_factor and
kvd_layout. Any difference gives another namespace; blocks are never
shared across them. vLLM picks the attention backend (and so the byte
layout of a page) in the workers, after the scheduler has connected: when
engines of one model may run different backends, give each backend its own
kvd_layout.

Block hashes. kvd keys a block by the first 16 bytes of vLLM's block hash
(sha256: 32 bytes, xxhash: 16); a shorter hash raises ValueError. These are
vLLM's chained hashes of the offloaded block's whole prefix (tokens, LoRA,
multimodal and cache-salt keys), so a hit is a hit on the prefix. kvd mixes
its tenant secret into the key: tenants never share blocks. Within a
tenant kvd trusts its engines: what one commits under a hash, the others
load as that prefix's KV.

Block layout. One kvd block holds one offloaded block (gpu block_size *
block_size_factor tokens) of every worker rank, as vLLM's CPU offloading
does: n = len(kv_cache_config.kv_cache_tensors) runs of run_bytes =
page_size_bytes * block_size_factor (rounded up to 256) per rank, rank r
owning bytes [r * n * run_bytes, (r + 1) * n * run_bytes). Within a rank
the canonical tensors its worker registers are packed in order, each
block_size_factor consecutive GPU pages (FlashAttention's K and V halves
are two canonical tensors of half a page; a cross-layer cache is one of n
pages); get_handlers checks that they fit. kvd sees an opaque geometry of
n * world_size runs of run_bytes (one run per rank where that would be
more than kvd's 1024 runs), tp_size = world size and tp_rank 0. Rank r is
rank r of the pipeline, context and tensor parallel groups, in that order.

Copies (KvdOffloadingHandler, in each worker, with a kvd.Client of its
own on the same namespace): on kvd's host backend a transfer is done when
transfer_async returns, one memcpy per GPU page (CPU KV tensors), or one
device gather or scatter staged through a host buffer (GPU KV tensors);
on the cuda backend the pool is device memory, and a transfer is queued on
a CUDA stream of the handler's own (a store after the model's work on the
current stream), done when its event is.

What the manager does (KvdOffloadingManager, in the scheduler):

  lookup         LOOKUP; hits stay pinned (one kvd ref each) for
                 lookup_lease_ms so the load that follows finds them
                 (expired pins go at the start of the manager's next call)
  prepare_load   the lease pins become load pins; hashes not pinned are
                 looked up again; a hash kvd lost (it restarted) gets id -1
  touch          remembers chain parents, and the chain: kvd's LRU order
                 of its blocks is refreshed by the LOOKUP of the lookup
                 that follows it (one request for both), else at the
                 manager's next call (a LOOKUP whose refs go at once)
  complete_load  drops the load pins
  prepare_store  ALLOC_PREFIX: hashes kvd has already are not stored
                 again; new blocks are held until complete_store
  complete_store COMMIT (parent: the chain's previous hash as touch saw
                 it) with the refs dropped in the same request, waiting
                 for nothing: the blocks stay cached at ref 0, a hash
                 already there deduplicated; on failure released
                 uncommitted

Differences from CPUOffloadingManager: capacity is kvd's pool (and the
tenant's quotas), shared with every engine; kvd evicts by itself (LRU of
unheld blocks, refreshed by lookups, commits and touch; leaf first,
so a block whose child is cached goes after it), so prepare_store never
reports evictions (block_hashes_evicted is always []) and there are no
"removed" events; prepare_store returns None when kvd has no room (ENOSPC,
EDQUOT) or is unreachable. A lookup pins its hits (the lease), where the
CPU manager holds nothing until prepare_load. prepare_store skips what kvd
has as a prefix of the hashes given (ALLOC_PREFIX); a hash kvd has behind
one it lacks is stored again and deduplicated at commit. Block ids are
kvd's. "stored" events (medium "KVD") name the blocks this manager
committed (a hash another engine committed first among them: the commit's
answer is not waited for); kvd's own evictions are not seen.

Failures. The manager never raises into vLLM for kvd's sake: while kvd is
unreachable lookup returns 0 and prepare_store None (vLLM then computes and
does not offload), and it reconnects with a back-off. Pins die with the
connection: a restarted kvd (new boot_id) knows none of the old ids, and
the manager never commits one. Workers keep the mapping of each kvd run
they met (the last two), so a load of blocks pinned before kvd died still
reads their bytes: no one can write them any more. A transfer that cannot
be done: a load (ids -1, or a kvd run the worker has no mapping of) fails,
which vLLM v0.19's OffloadingConnectorWorker asserts against: the engine
stops rather than run on KV it does not have; a store into a kvd run that
is over writes nothing and succeeds (vLLM asserts success too): its blocks
died with that run, so nothing unwritten is ever committed; a store into
the live kvd that the worker cannot reach (kvd refused its connection)
fails too, since the scheduler would commit blocks never written. Do not
end the scheduler's kvd client while its engine runs (kvctl disconnect):
the blocks it holds for transfers in flight would go back to the pool
under them.
"""
import errno
import hashlib
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch

import kvd
from vllm.v1.kv_offload.abstract import (OffloadingEvent, OffloadingManager,
                                         PrepareStoreOutput)
from vllm.v1.kv_offload.mediums import BlockIDsLoadStoreSpec, GPULoadStoreSpec
from vllm.v1.kv_offload.spec import OffloadingSpec
from vllm.v1.kv_offload.worker.worker import OffloadingHandler, TransferResult

__all__ = ["KvdOffloadingSpec", "KvdOffloadingManager", "KvdOffloadingHandler",
           "KvdLoadStoreSpec", "KvdBlockLayout", "kvd_hash"]

logger = logging.getLogger("vllm.kvd")

MEDIUM = "KVD"
CHUNK = 4096                    # entries per kvd request (fits data_bytes)
MODEL_ID_MAX = 63               # kvd's model id: 64 bytes with the NUL
MAX_RUNS = 1024                 # kvd's opaque geometry limits
MAX_BLOCK_BYTES = 1 << 30
BACKOFF_MIN, BACKOFF_MAX = 0.1, 5.0
FRESH_MAX = 1 << 18             # hashes whose last LRU refresh is kept


def kvd_hash(block_hash):
    """kvd's 16-byte key for a vLLM block hash: its first 16 bytes."""
    if len(block_hash) < 16:
        raise ValueError(f"kvd.vllm needs block hashes of at least 16 bytes "
                         f"(sha256 or xxhash), got {len(block_hash)}")
    return bytes(block_hash[:16])


def _packed(hashes):
    """The 16-byte keys of `hashes`, packed (one bytes object)."""
    b = b"".join([h[:16] for h in hashes])
    if len(b) != 16 * len(hashes):
        for h in hashes:
            kvd_hash(h)             # raises, naming the short one
    return b


def _chunks(seq, n=None):
    n = n or CHUNK
    for i in range(0, len(seq), n):
        yield seq[i:i + n]


def _round_up(x, m):
    return -(-x // m) * m


class KvdLoadStoreSpec(BlockIDsLoadStoreSpec):
    """Blocks in kvd's pool: kvd block ids (-1: not found) and the kvd run
    (boot_id) they belong to: ids mean nothing in another run."""

    def __init__(self, block_ids, boot_id=0):
        super().__init__(block_ids)
        self.boot_id = boot_id

    @staticmethod
    def medium():
        return MEDIUM

    def __repr__(self):
        return f"KvdLoadStoreSpec({self.block_ids!r}, boot_id={self.boot_id:#x})"


# ------------------------------------------------------------------ layout
@dataclass(frozen=True)
class KvdBlockLayout:
    """Where each rank's bytes lie in one kvd block, and kvd's geometry."""
    ranks: int          # world size
    runs: int           # n: KV cache tensors per rank
    run_bytes: int      # one tensor's offloaded page, rounded up to 256
    block_tokens: int

    def __post_init__(self):
        if not 1 <= self.block_tokens <= 1024:
            raise ValueError(f"kvd.vllm: offloaded blocks of {self.block_tokens} "
                             "tokens: kvd takes 1 to 1024 (lower block_size)")
        if self.block_bytes > MAX_BLOCK_BYTES or self.kvd_runs > MAX_RUNS:
            raise ValueError(f"kvd.vllm: blocks of {self.ranks} ranks x {self.runs} "
                             f"tensors x {self.run_bytes} bytes are beyond kvd's "
                             f"opaque geometry (1 GiB, {MAX_RUNS} runs)")

    @classmethod
    def build(cls, ranks, runs, run_bytes, block_tokens):
        return cls(ranks, runs, _round_up(run_bytes, 256), block_tokens)

    @property
    def rank_bytes(self):
        return self.runs * self.run_bytes

    @property
    def block_bytes(self):
        return self.ranks * self.rank_bytes

    @property
    def kvd_runs(self):
        """kvd's runs per block: one per tensor and rank, or one per rank
        where that would be more than kvd takes."""
        n = self.ranks * self.runs
        return n if n <= MAX_RUNS else self.ranks

    def rank_offset(self, rank):
        return rank * self.rank_bytes

    def geometry(self):
        """kvd.Client keyword arguments of this layout's namespace."""
        g = kvd.opaque_geometry(self.kvd_runs, self.block_bytes // self.kvd_runs,
                                self.block_tokens)
        g.update(tp_size=self.ranks, tp_rank=0)
        return g

    def tensor_offsets(self, sizes):
        """Offsets in a rank's bytes of canonical tensors of `sizes` bytes
        per offloaded block: packed in order, 256-aligned when that fits."""
        for align in (256, 1):
            offs, at = [], 0
            for s in sizes:
                offs.append(at)
                at += _round_up(s, align)
            if at <= self.rank_bytes:
                return offs
        raise ValueError(f"kvd.vllm: the worker's canonical KV tensors need "
                         f"{sum(sizes)} bytes per offloaded block and rank, the "
                         f"namespace's layout has {self.rank_bytes} (runs of "
                         f"{self.run_bytes} x {self.runs}): the scheduler and the "
                         "workers disagree on the KV cache layout")


# ----------------------------------------------------------------- manager
class KvdOffloadingManager(OffloadingManager):
    """vLLM's OffloadingManager over kvd's prefix cache (scheduler side).

    One kvd.Client, made by `connect()` when needed and again after kvd
    went away (with a back-off). Holds three kinds of pins, each one kvd
    ref: lease pins (hits of lookup, released after lookup_lease_ms unless
    a load takes them), load pins (prepare_load to complete_load, counted
    per call) and store pins (prepare_store to complete_store). See the
    module's docstring.
    """

    def __init__(self, connect, block_size, *, lookup_lease_ms=2000,
                 touch_refresh_ms=1000, enable_events=False,
                 clock=time.monotonic):
        self._connect = connect
        self.block_size = block_size
        self.medium = MEDIUM
        self._lease_s = max(0, lookup_lease_ms) / 1000.0
        self._clock = clock
        self.events = [] if enable_events else None
        self._c = None
        self._boot = 0
        self._retry_at = 0.0
        self._backoff = BACKOFF_MIN
        self._lease = OrderedDict()     # hash -> (id, deadline), by deadline
        self._loads = {}                # hash -> [id, count]
        self._stores = {}               # hash -> (id, boot, seq)
        self._seq = 0                   # store pins' order
        self._parents = {}              # store-pinned hash -> parent hash
        self._touched = []              # touch's chain, not yet refreshed
        self._errno = 0                 # of the last call that failed
        self._uncommitted = []          # [(pins, parents)] refused for now
        self._unreleased = []           # ids refused for now
        self._fresh = OrderedDict()     # hash -> when kvd last saw it used
        self._touch_s = max(0, touch_refresh_ms) / 1000.0

    # --- the connection
    def client(self, strict=False):
        """The connected kvd.Client, or None while kvd is unreachable
        (strict: raise when kvd refuses the namespace itself)."""
        if self._c is None and self._clock() >= self._retry_at:
            try:
                self._c = self._connect()
            except OSError as e:
                if strict and e.errno in _CONFIG_ERRNOS:
                    raise RuntimeError(f"kvd.vllm: kvd refused this engine: {e}") from e
                self._retry_at = self._clock() + self._backoff
                if self._backoff == BACKOFF_MIN:
                    logger.warning("kvd.vllm: cannot connect to kvd (%s); "
                                   "offloading paused, retrying", e)
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
                return None
            self._boot = self._c.boot_id
            self._backoff = BACKOFF_MIN
            logger.info("kvd.vllm: connected to kvd (boot %#x, %d-byte blocks)",
                        self._boot, self._c.block_bytes)
        return self._c

    @property
    def boot_id(self):
        return self._boot if self._c is not None else 0

    def _failed(self, what, e):
        """A kvd call failed: forget everything if kvd went away."""
        if getattr(e, "errno", None) not in (errno.ECONNRESET, errno.EPIPE,
                                              errno.ENOTCONN):
            logger.warning("kvd.vllm: %s: %s", what, e)
            return
        logger.warning("kvd.vllm: kvd went away (%s); its blocks are lost, "
                       "reconnecting", what)
        self.close()

    def close(self):
        """Drop the connection; kvd releases every block still pinned."""
        c, self._c = self._c, None
        self._lease.clear()
        self._loads.clear()
        self._stores.clear()
        self._parents.clear()
        self._touched = []
        self._uncommitted, self._unreleased = [], []
        if c is not None:
            try:
                c.close()
            except OSError:
                pass

    def _call(self, what, fn, *args, connect=True):
        """fn(client, *args); None (logged) when it fails. Only calls that
        name no id may connect: ids never outlive their connection."""
        c = self.client() if connect else self._c
        self._errno = 0
        if c is None:
            return None
        try:
            return fn(c, *args)
        except OSError as e:
            self._errno = e.errno
            self._failed(what, e)
            return None

    def _transient(self):
        """Did the last call fail only for now (kvd slow to answer a
        call that timed out), the connection alive: try it again later?"""
        return self._c is not None and self._errno in (errno.EBUSY, errno.ETIMEDOUT)

    def _release(self, ids):
        """Drop refs without waiting: nothing needs kvd's answer, which
        the next request reaps (kvd.Client.release(wait=False)). Refused
        for now (a call timed out): kept and tried again at the next
        call, so no ref stays for the engine's life."""
        ids = [i for i in ids if i >= 0]
        for n, part in enumerate(_chunks(ids)):
            if self._call("release", lambda c, p: c.release(p, wait=False),
                          part, connect=False) is None:
                if self._transient():
                    self._unreleased += ids[n * CHUNK:]
                return

    def _retry(self):
        """Commits and releases kvd refused for now: again, once."""
        commits, self._uncommitted = self._uncommitted, []
        ids, self._unreleased = self._unreleased, []
        for pins, parents in commits:
            self._commit(pins, parents)
        self._release(ids)

    def _refresh(self, chain, keep=0):
        """LOOKUP `chain` (refreshing its hits in kvd's LRU) and drop the
        refs of the hits before index `keep`: all the hits' ids."""
        ids = self._lookup(chain)
        self._release(ids[:keep])
        return ids

    def _saw(self, hashes):
        """kvd refreshed `hashes` in its LRU just now (hits, commits).
        Past FRESH_MAX the oldest entries go (a hash forgotten is only
        refreshed once more than needed)."""
        fresh = self._fresh
        fresh.update(dict.fromkeys(hashes, self._clock()))
        while len(fresh) > FRESH_MAX:
            fresh.popitem(last=False)

    def _stale(self, chain):
        """Does a block of `chain` want a refresh: one not refreshed for
        touch_refresh_s and not about to be committed (a store pin)?"""
        old = self._clock() - self._touch_s
        return any(self._fresh.get(h, -1e18) < old for h in chain
                   if h not in self._stores)

    def _flush_touch(self):
        """A touch no lookup took along (the scheduler's touch of a
        prompt all on the GPU, or of a request it stores): refresh its
        chain now with one LOOKUP whose refs go at once, unless its
        blocks were hit or committed within touch_refresh_s."""
        chain, self._touched = self._touched, []
        if chain and self._c is not None and self._stale(chain):
            self._refresh(chain, len(chain))

    def _expire(self):
        if self._uncommitted or self._unreleased:
            self._retry()
        self._flush_touch()
        now, dead = self._clock(), []
        while self._lease:
            h, (bid, deadline) = next(iter(self._lease.items()))
            if deadline > now:
                break
            del self._lease[h]
            dead.append(bid)
        self._release(dead)

    def _lookup(self, hashes):
        """LOOKUP in chunks; the ids of the longest hit prefix, refs held."""
        ids = []
        for part in _chunks(hashes):
            got = self._call("lookup", lambda c, p: c.lookup(_packed(p)), part)
            if got is None:
                return ids
            self._saw(part[:len(got)])
            ids += got
            if len(got) < len(part):
                break
        return ids

    def _remember_parents(self, hashes):
        for parent, h in zip(hashes, hashes[1:]):
            if h in self._stores:
                self._parents[h] = parent

    # --- OffloadingManager
    def _lookup_touched(self, chain, hashes):
        """touch's `chain` and the lookup of `hashes` that continues it
        in one LOOKUP: the chain's hits only refresh kvd's LRU (their
        refs go at once). A chain kvd lacks part of (a block vLLM never
        offloaded) ends the hits early: then `hashes` again alone."""
        ids = self._refresh(chain + hashes, len(chain))
        if len(ids) < len(chain) and self._c is not None:
            return self._lookup(hashes)
        return ids[len(chain):]

    def _touched_prefix(self, hashes):
        """How many hashes of touch's chain come before `hashes`, when
        `hashes` continues it (the scheduler touches a request's whole
        chain, then looks up from its first block not on the GPU); else
        None, and the touch is refreshed on its own."""
        chain, n = self._touched, len(hashes)
        start = len(chain) - n
        if start < 0 or chain[start:] != hashes:
            return None
        self._touched = []
        return chain[:start]

    def lookup(self, block_hashes):
        hashes = list(block_hashes)
        before = self._touched_prefix(hashes)
        self._expire()
        k = 0
        while k < len(hashes) and hashes[k] in self._lease:
            k += 1
        if before is not None and k < len(hashes):
            ids = self._lookup_touched(before + hashes[:k], hashes[k:])
        elif k < len(hashes):
            ids = self._lookup(hashes[k:])
        else:
            ids = []
        if self._c is None:
            return 0
        deadline, dup = self._clock() + self._lease_s, []
        for h in hashes[:k]:
            self._lease[h] = (self._lease[h][0], deadline)
            self._lease.move_to_end(h)
        for h, bid in zip(hashes[k:], ids):
            if h in self._lease:
                dup.append(bid)
                bid = self._lease.pop(h)[0]
            self._lease[h] = (bid, deadline)
        self._release(dup)
        return k + len(ids)

    def prepare_load(self, block_hashes):
        self._expire()
        hashes = list(block_hashes)
        ids, again, more = [], [], []
        for i, h in enumerate(hashes):
            if h in self._lease:
                ids.append(self._take_lease(h))
            elif h in self._loads:
                ids.append(self._loads[h][0])
                more.append(i)
            else:
                ids.append(-1)
                again.append(i)
        self._ref_loads(hashes, ids, more)
        self._relookup(hashes, ids, again)
        lost = [h.hex()[:16] for h, bid in zip(hashes, ids) if bid < 0]
        if lost:
            logger.error("kvd.vllm: prepare_load: %d of %d blocks no longer in kvd "
                         "(first %s); that load will fail", len(lost), len(ids),
                         lost[0])
        return KvdLoadStoreSpec(ids, self.boot_id)

    def _take_lease(self, h):
        bid = self._lease.pop(h)[0]
        pin = self._loads.setdefault(h, [bid, 0])
        if pin[0] != bid:               # cannot happen within one kvd run
            self._release([bid])
        pin[1] += 1
        return pin[0]

    def _ref_loads(self, hashes, ids, idx):
        """One more kvd ref for hashes already load-pinned."""
        if not idx:
            return
        if self._call("ref", lambda c, p: c.ref(p), [ids[i] for i in idx],
                      connect=False) is None:
            for i in idx:
                ids[i] = -1
            return
        for i in idx:
            self._loads[hashes[i]][1] += 1

    def _relookup(self, hashes, ids, idx):
        """LOOKUP hashes that were not pinned, one run of them at a time."""
        while idx:
            found = self._lookup([hashes[i] for i in idx])
            for i, bid in zip(idx, found):
                ids[i] = bid
                pin = self._loads.setdefault(hashes[i], [bid, 0])
                pin[1] += 1
            idx = idx[len(found) + 1:] if self._c is not None else []

    def touch(self, block_hashes):
        """Remembers chain parents (for COMMIT) and the chain, whose
        blocks the next call refreshes in kvd's LRU: folded into the
        LOOKUP of a lookup that continues it, else one LOOKUP of its own
        (refs dropped at once)."""
        self._expire()
        hashes = list(block_hashes)
        _packed(hashes)                 # a short hash raises here, not later
        self._remember_parents(hashes)
        self._touched = hashes

    def complete_load(self, block_hashes):
        self._expire()
        done = []
        for h in block_hashes:
            pin = self._loads.get(h)
            if pin is None:
                continue
            done.append(pin[0])
            pin[1] -= 1
            if pin[1] == 0:
                del self._loads[h]
        self._release(done)

    def prepare_store(self, block_hashes):
        self._expire()
        hashes = list(block_hashes)
        todo = [h for h in dict.fromkeys(hashes) if h not in self._stores
                and h not in self._lease and h not in self._loads]
        if not todo:
            return PrepareStoreOutput([], KvdLoadStoreSpec([], self.boot_id), [])
        new = self._alloc(todo)
        if new is None:
            return None
        boot = self.boot_id
        for h, bid in new:
            self._seq += 1
            self._stores[h] = (bid, boot, self._seq)
        keys = [h for h, _ in new]
        return PrepareStoreOutput(
            keys, KvdLoadStoreSpec([bid for _, bid in new], boot), [])

    def _alloc(self, todo):
        """ALLOC_PREFIX in chunks: [(hash, new id)] for the hashes kvd does
        not have yet; None (nothing held) when kvd has no room."""
        new, hits = [], []
        for part in _chunks(todo):
            got = self._call_alloc(part)
            if got is None:
                self._release(hits + [bid for _, bid in new])
                return None
            n, ids = got
            self._saw(part[:n])
            hits += ids[:n]
            new += list(zip(part[n:], ids[n:]))
        self._release(hits)
        return new

    def _call_alloc(self, part):
        c = self.client()
        if c is None:
            return None
        try:
            return c.alloc_prefix(_packed(part), len(part))
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.E2BIG):
                logger.debug("kvd.vllm: no room for %d blocks: %s", len(part), e)
            else:
                self._failed("alloc_prefix", e)
            return None

    def complete_store(self, block_hashes, success=True):
        self._expire()
        pins = self._take_stores(block_hashes)
        boot, pop = self.boot_id, self._parents.pop
        parents = {h: pop(h, None) for h, _ in pins}
        mine = [(h, pin[0]) for h, pin in pins if pin[1] == boot]
        if len(mine) < len(pins):
            logger.warning("kvd.vllm: %d stored blocks belong to a kvd that "
                           "restarted: dropped", len(pins) - len(mine))
        if success:
            self._commit(mine, parents)
        else:
            self._release([bid for _, bid in mine])

    def _take_stores(self, hashes):
        """The store pins of `hashes`, in the order they were stored: a
        chain's parents before their children, as COMMIT links them."""
        stores = self._stores
        pins = [(h, stores.pop(h)) for h in hashes if h in stores]
        pins.sort(key=lambda pin: pin[1][2])
        return pins

    def _commit(self, pins, parents):
        """COMMIT the store pins and drop their refs in the same request
        (kvd.Client.commit(release=True, wait=False)): nothing waits for
        kvd's answer; the blocks stay cached at ref 0, a hash another
        engine committed first deduplicated."""
        if not pins:
            return
        stored = []
        for part in _chunks(pins):
            entries = [(bid, h[:16], parents[h] and parents[h][:16])
                       for h, bid in part]
            if self._call("commit", lambda c, e: c.commit(e, release=True, wait=False)
                          or True, entries, connect=False) is None:
                if self._transient():   # written whole: commit them later
                    self._uncommitted.append((part, parents))
                else:
                    self._release([bid for _, bid in part])
                continue
            self._saw([h for h, _ in part])
            stored += [h for h, _ in part]
        if stored and self.events is not None:
            self.events.append(OffloadingEvent(stored, self.block_size, MEDIUM, False))

    def take_events(self):
        if self.events is not None:
            yield from self.events
            self.events.clear()


# ---------------------------------------------------------------- handlers
class _WorkerPool:
    """A worker's view of kvd's pool: one kvd.Client per kvd run (boot_id)
    it has met, the newest two kept, each with its pool as a tensor of
    blocks (max_blocks, block_bytes) of uint8 on the pool's device."""

    KEEP = 2

    def __init__(self, connect):
        self._connect = connect
        self._views = OrderedDict()     # boot_id -> (client, blocks)
        self._retry_at = 0.0
        self._backoff = BACKOFF_MIN

    def blocks(self, boot_id, ids):
        """(pool tensor of kvd run boot_id with `ids` mapped, None), or
        (None, why): "gone" (that kvd run is over), "unreachable" (no
        connection to kvd), "unmapped" (kvd did not send the blocks)."""
        view = self._views.get(boot_id)
        if view is None:
            why = self._meet(boot_id)
            if why:
                return None, why
            view = self._views[boot_id]
        c, blocks = view
        try:
            self._map(c, ids)
        except OSError as e:
            gone = e.errno == errno.ECONNRESET
            logger.error("kvd.vllm: worker: %d blocks of kvd %#x not mapped: %s",
                         len(ids), boot_id, e)
            return None, "gone" if gone else "unmapped"
        return blocks, None

    @staticmethod
    def _map(c, ids):
        ids = sorted(set(int(i) for i in ids))
        try:
            c.block_addrs(ids)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            c.nop()                     # kvd sends the extents first
            c.block_addrs(ids)

    def _meet(self, boot_id):
        """Connect once more, for a kvd run not mapped yet: None when it is
        boot_id, else why not (see blocks)."""
        if time.monotonic() < self._retry_at:
            return "unreachable"
        try:
            c = self._connect()
        except OSError as e:
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            logger.error("kvd.vllm: worker cannot connect to kvd: %s", e)
            return "unreachable"
        self._backoff = BACKOFF_MIN
        if c.boot_id in self._views:
            c.close()
        else:
            self._views[c.boot_id] = (c, self._tensor(c))
            self._trim()
        if c.boot_id == boot_id or boot_id is None:
            return None
        self._retry_at = time.monotonic() + BACKOFF_MIN   # not again per job
        return "gone"

    def _tensor(self, c):
        mem = c.pool_memory()
        if c.backend == "cuda":
            # on kvd's GPU, where the pool is mapped (never a copy elsewhere)
            dev = torch.device("cuda", c.pool_info()["device"])
            flat = torch.as_tensor(mem, device=dev)
        else:
            flat = torch.frombuffer(mem, dtype=torch.uint8)
        n = c.max_blocks
        return flat[:n * c.block_bytes].view(n, c.block_bytes)

    def _trim(self):
        while len(self._views) > self.KEEP:
            _, (c, blocks) = self._views.popitem(last=False)
            del blocks
            try:
                c.close()
            except OSError:
                pass

    def connect_now(self):
        """Map the pool at start-up when kvd is there (logs when not)."""
        self._meet(None)

    def close(self):
        self.KEEP = 0
        self._trim()


class KvdOffloadingHandler(OffloadingHandler):
    """Copies between vLLM's GPU KV cache and kvd's pool, in one direction
    (store: GPU -> KVD, load: KVD -> GPU), for one worker rank.

    gpu_tensors: the canonical KV tensors, (num_gpu_blocks, page) int8;
    offsets: each tensor's offset in a kvd block (the rank's included).
    One kvd block is block_size_factor consecutive GPU blocks; a load may
    start inside the first one (vLLM's block_indices). On the host backend
    a transfer is done when transfer_async returns; on the cuda backend it
    runs on a stream of the handler's own, in order, and get_finished polls
    its events.

    A job that cannot be done (module docstring, Failures): a load fails;
    a store whose kvd run is over writes nothing and succeeds (its blocks
    died with that run); a store into a live kvd that this worker cannot
    reach fails, since the scheduler would commit blocks never written.
    """

    def __init__(self, pool, rank, gpu_tensors, offsets, factor, store):
        self.pool = pool
        self.rank = rank
        self.gpu = [t.view(torch.uint8) for t in gpu_tensors]
        self.offsets = offsets
        self.pages = [t.shape[1] for t in gpu_tensors]
        self.factor = factor
        self.store = store
        self.transfer_type = ("GPU", MEDIUM) if store else (MEDIUM, "GPU")
        self.cuda = gpu_tensors[0].is_cuda
        self.staged = self.cuda         # a host pool is reached through the host
        self._stream = torch.cuda.Stream(gpu_tensors[0].device) if self.cuda else None
        self._done = []                 # TransferResults ready
        self._running = []              # (job_id, start, end, nsub) on the stream

    def transfer_async(self, job_id, spec):
        src, dst = spec
        kspec, gspec = (dst, src) if self.store else (src, dst)
        assert isinstance(kspec, KvdLoadStoreSpec) and isinstance(gspec, GPULoadStoreSpec)
        nsub = len(gspec.block_ids)
        skip = len(kspec.block_ids) * self.factor - nsub
        assert 0 <= skip < self.factor and not (self.store and skip), \
            f"kvd.vllm: {len(kspec.block_ids)} offloaded blocks for {nsub} GPU blocks"
        assert not gspec.block_indices or gspec.block_indices[0] % self.factor == skip
        gpu_blocks = len(self.gpu[0]) if self.gpu else 0
        assert not nsub or 0 <= gspec.block_ids.min() <= gspec.block_ids.max() < gpu_blocks, \
            f"kvd.vllm: GPU block ids outside [0, {gpu_blocks})"
        blocks, why = self._blocks(job_id, kspec) if nsub else (None, None)
        if blocks is None:
            ok = not nsub or (self.store and why == "gone")
            self._finish(job_id, ok, 0, 0.0)
        elif self.cuda:
            self._run_cuda(job_id, blocks, kspec, gspec, skip)
        else:
            t0 = time.perf_counter()
            self._copy(blocks, kspec, gspec, skip)
            self._finish(job_id, True, self._bytes(nsub), time.perf_counter() - t0)
        return True

    def _bytes(self, nsub):
        return nsub * sum(self.pages)

    def _blocks(self, job_id, kspec):
        """(the pool tensor for this job, None), or (None, why) logged."""
        if (kspec.block_ids < 0).any():
            logger.error("kvd.vllm: load job %d names blocks kvd lost: it fails",
                         job_id)
            return None, "lost"
        blocks, why = self.pool.blocks(kspec.boot_id, kspec.block_ids)
        if blocks is None:
            what = ("written nowhere: its kvd is gone" if self.store and why == "gone"
                    else "it fails")
            logger.error("kvd.vllm: %s job %d: kvd %#x %s: %s",
                         "store" if self.store else "load", job_id, kspec.boot_id,
                         why, what)
        return blocks, why

    def _finish(self, job_id, success, nbytes, seconds):
        self._done.append(TransferResult(job_id=job_id, success=success,
                                         transfer_size=nbytes, transfer_time=seconds,
                                         transfer_type=self.transfer_type))

    def _copy(self, blocks, kspec, gspec, skip):
        """One job's copies. GPU page s of the job is slot (s + skip) %
        factor of offloaded block (s + skip) // factor."""
        if blocks.is_cuda:
            self._copy_device(blocks, kspec.block_ids, gspec.block_ids, skip)
        else:
            self._copy_host(blocks.numpy(), kspec.block_ids, gspec.block_ids, skip)

    def _copy_device(self, blocks, kids, gids, skip):
        """A device pool: per canonical tensor one gather and one scatter."""
        kid = torch.from_numpy(kids).to(blocks.device)
        gid = torch.from_numpy(gids).to(self.gpu[0].device)
        for g, off, page in zip(self.gpu, self.offsets, self.pages):
            run = blocks.narrow(1, off, page * self.factor)
            if self.store:
                data = g.index_select(0, gid).view(len(kid), page * self.factor)
                run.index_copy_(0, kid, data.to(blocks.device))
            else:
                data = run.index_select(0, kid).view(-1, page)[skip:skip + len(gid)]
                g.index_copy_(0, gid, data.to(g.device))

    def _copy_host(self, pool, kids, gids, skip):
        """A host pool: one memcpy per page (numpy row copies; torch 1.13's
        index_copy_ on the CPU goes element by element, 10x slower)."""
        where = [(int(kids[b]), slot) for b, slot in
                 (divmod(s + skip, self.factor) for s in range(len(gids)))]
        gids = gids.tolist()
        for g, off, page in zip(self.gpu, self.offsets, self.pages):
            run = pool[:, off:off + page * self.factor].view()
            run.shape = (pool.shape[0], self.factor, page)      # no copy, or raise
            if self.staged:
                self._copy_staged(run, where, g, gids)
            elif self.store:
                g = g.numpy()
                for (b, slot), i in zip(where, gids):
                    run[b, slot] = g[i]
            else:
                g = g.numpy()
                for (b, slot), i in zip(where, gids):
                    g[i] = run[b, slot]

    def _copy_staged(self, run, where, g, gids):
        """GPU tensors and a host pool: a gather or scatter on the device,
        one copy across, a memcpy per page on the host."""
        gid = torch.tensor(gids, device=g.device)
        if self.store:
            stage = g.index_select(0, gid).cpu().numpy()
            for (b, slot), row in zip(where, stage):
                run[b, slot] = row
        else:
            stage = np.empty((len(where), run.shape[2]), dtype=np.uint8)
            for i, (b, slot) in enumerate(where):
                stage[i] = run[b, slot]
            g.index_copy_(0, gid, torch.from_numpy(stage).to(g.device))

    def _run_cuda(self, job_id, blocks, kspec, gspec, skip):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        if self.store:      # after the model's writes to these GPU blocks
            self._stream.wait_stream(torch.cuda.current_stream(self._stream.device))
        with torch.cuda.stream(self._stream):
            start.record(self._stream)
            self._copy(blocks, kspec, gspec, skip)
            end.record(self._stream)
        self._running.append((job_id, start, end, len(gspec.block_ids)))

    def get_finished(self):
        while self._running and self._running[0][2].query():
            job_id, start, end, nsub = self._running.pop(0)
            self._finish(job_id, True, self._bytes(nsub),
                         start.elapsed_time(end) * 1e-3)
        done, self._done = self._done, []
        return done

    def wait(self, job_ids):
        for job_id, _, end, _ in self._running:
            if job_id in job_ids:
                end.synchronize()


# -------------------------------------------------------------------- spec
class KvdOffloadingSpec(OffloadingSpec):
    """vLLM OffloadingSpec for kvd: load it with spec_name
    "KvdOffloadingSpec" and spec_module_path "kvd.vllm" (module docstring).
    """

    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        if len(self.gpu_block_size) != 1:
            raise ValueError("kvd.vllm: exactly one KV cache group is supported "
                             f"(got {len(self.gpu_block_size)})")
        self.offloaded_block_size = self.gpu_block_size[0] * self.block_size_factor
        self.world_size = vllm_config.parallel_config.world_size
        self.layout = KvdBlockLayout.build(
            self.world_size, len(kv_cache_config.kv_cache_tensors),
            max(self._page_sizes()) * self.block_size_factor,
            self.offloaded_block_size)
        self.model_id = _model_id(self._model_name())
        self.model_rev = "L" + hashlib.sha256(
            self._layout_key().encode()).hexdigest()[:24]
        self.socket_path = (self.extra_config.get("kvd_socket")
                            or os.environ.get("KVD_SOCKET") or None)
        self.lookup_lease_ms = int(self.extra_config.get("lookup_lease_ms", 2000))
        self.touch_refresh_ms = int(self.extra_config.get("touch_refresh_ms", 1000))
        self._manager = None
        self._handlers = None

    # --- what identifies the namespace
    def _model_name(self):
        name = self.extra_config.get("kvd_model_id")
        if not name:
            name = getattr(getattr(self.vllm_config, "model_config", None), "model", None)
        if not name:
            raise ValueError("kvd.vllm: no model name (vllm_config.model_config.model "
                             "or kv_connector_extra_config kvd_model_id)")
        return str(name)

    def _group_specs(self):
        for group in self.kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            inner = getattr(spec, "kv_cache_specs", None)    # UniformTypeKVCacheSpecs
            yield from (inner.values() if inner else (spec,))

    def _page_sizes(self):
        """Page bytes of each KV cache tensor (of its first layer)."""
        per_layer = {}
        for group in self.kv_cache_config.kv_cache_groups:
            inner = getattr(group.kv_cache_spec, "kv_cache_specs", None) or {}
            for name in group.layer_names:
                per_layer[name] = inner.get(name, group.kv_cache_spec).page_size_bytes
        tensors = self.kv_cache_config.kv_cache_tensors
        if not tensors:
            raise ValueError("kvd.vllm: the KV cache config has no tensors")
        return [per_layer[t.shared_by[0]] for t in tensors]

    def _layout_key(self):
        cfg = self.vllm_config
        model = getattr(cfg, "model_config", None)
        attn = getattr(cfg, "attention_config", None)
        parts = [f"revision={getattr(model, 'revision', None)}"]
        for s in self._group_specs():
            parts.append(f"{type(s).__name__}(block_size={s.block_size},"
                         f"num_kv_heads={getattr(s, 'num_kv_heads', None)},"
                         f"head_size={getattr(s, 'head_size', None)},"
                         f"dtype={getattr(s, 'dtype', None)},"
                         f"page_size_bytes={s.page_size_bytes})")
        parts += [f"tensors={len(self.kv_cache_config.kv_cache_tensors)}",
                  f"backend={getattr(attn, 'backend', None)}",
                  f"cache_dtype={getattr(cfg.cache_config, 'cache_dtype', None)}",
                  f"world_size={self.world_size}",
                  f"block_size_factor={self.block_size_factor}",
                  f"kvd_layout={self.extra_config.get('kvd_layout', '')}"]
        return "\n".join(parts)

    # --- connections
    def connect(self):
        """A new kvd.Client of this spec's namespace."""
        return kvd.Client(
            self.model_id, socket_path=self.socket_path, model_rev=self.model_rev,
            connect_timeout_ms=int(self.extra_config.get("kvd_connect_timeout_ms", 0)),
            call_timeout_ms=int(self.extra_config.get("kvd_call_timeout_ms", 0)),
            **self.layout.geometry())

    def get_manager(self):
        if self._manager is None:
            events = getattr(self.vllm_config, "kv_events_config", None)
            manager = KvdOffloadingManager(
                self.connect, self.offloaded_block_size,
                lookup_lease_ms=self.lookup_lease_ms,
                touch_refresh_ms=self.touch_refresh_ms,
                enable_events=bool(events and events.enable_kv_cache_events))
            manager.client(strict=True)
            self._manager = _filtered(manager, self.extra_config)
        return self._manager

    def get_handlers(self, kv_caches):
        if self._handlers is None:
            self._handlers = self._make_handlers(kv_caches)
        store, load = self._handlers
        yield GPULoadStoreSpec, KvdLoadStoreSpec, store
        yield KvdLoadStoreSpec, GPULoadStoreSpec, load

    def _make_handlers(self, kv_caches):
        if len(kv_caches.group_data_refs) != 1:
            raise ValueError("kvd.vllm: exactly one KV cache group is supported")
        rank = self.worker_rank()
        gpu = [t.tensor.view(torch.int8).view(-1, t.page_size_bytes)
               for t in kv_caches.tensors]
        sizes = [t.page_size_bytes * self.block_size_factor for t in kv_caches.tensors]
        want = sum(self._page_sizes()) * self.block_size_factor
        if sum(sizes) < want:
            raise ValueError(f"kvd.vllm: the worker's canonical KV tensors hold "
                             f"{sum(sizes)} bytes per offloaded block, the KV cache "
                             f"config {want}: a tensor is missing, and blocks "
                             "stored so would lack its bytes")
        base = self.layout.rank_offset(rank)
        offsets = [base + o for o in self.layout.tensor_offsets(sizes)]
        pool = _WorkerPool(self.connect)
        pool.connect_now()
        return tuple(KvdOffloadingHandler(pool, rank, gpu, offsets,
                                          self.block_size_factor, store)
                     for store in (True, False))

    def worker_rank(self):
        """This worker's rank among the world_size ranks of a block."""
        if self.world_size == 1:
            return 0
        from vllm.distributed import parallel_state as ps
        tp, pp = ps.get_tp_group(), ps.get_pp_group()
        try:
            pcp = ps.get_pcp_group()
        except (AssertionError, AttributeError):
            pcp = None
        inner = (pcp.rank_in_group, pcp.world_size) if pcp else (0, 1)
        rank = ((pp.rank_in_group * inner[1] + inner[0]) * tp.world_size
                + tp.rank_in_group)
        if not 0 <= rank < self.world_size:
            raise ValueError(f"kvd.vllm: worker rank {rank} outside world size "
                             f"{self.world_size}")
        return rank


def _model_id(name):
    raw = name.encode()
    if len(raw) <= MODEL_ID_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return raw[:46].decode(errors="ignore") + "-" + digest


# kvd refusing the namespace itself: an error at start-up, not retried
_CONFIG_ERRNOS = (errno.EINVAL, errno.E2BIG, errno.EPROTO, errno.EACCES,
                  errno.EPERM, errno.ENAMETOOLONG)


def _filtered(manager, extra):
    threshold = int(extra.get("store_threshold", 0))
    if threshold < 2:
        return manager
    from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager
    return FilterReusedOffloadingManager(
        backing=manager, store_threshold=threshold,
        max_tracker_size=int(extra.get("max_tracker_size", 64_000)))
