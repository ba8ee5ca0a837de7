# SPDX-License-Identifier: MIT
"""KvdOffloadingManager against vLLM's CPUOffloadingManager scenarios.

The scenarios of vLLM v0.19's tests/v1/kv_offload/test_cpu_manager.py
(vendored, unmodified), re-run on a private kvd whose pool holds exactly
4 blocks, as the CPU manager's num_blocks=4, with lookup_lease_ms=0 (a
lookup's pins are let go at the next call, as the CPU manager holds
nothing after a lookup). They assert the CPU manager's answers where the
semantics agree; where they differ:

| CPU manager (test_cpu_manager.py)        | kvd manager, and why                          |
|------------------------------------------|-----------------------------------------------|
| hashes b"1", b"2", ...                   | 32-byte hashes (sha256 of "1", ...): kvd keys |
|                                          | a block by 16 bytes; shorter ones raise       |
|                                          | ValueError (test_short_hash)                  |
| store_block_ids [0, 1], [2, 3, 0], ...   | kvd's block ids: checked to be distinct,      |
|                                          | inside the namespace, and to be the ids       |
|                                          | prepare_load returns later for those hashes   |
| block_hashes_evicted [1], [2, 3, 4], [8] | always []: kvd evicts on its own (LRU of      |
|                                          | unheld blocks, leaf first), unreported; which |
|                                          | blocks went is checked by lookups             |
| "removed" OffloadingEvents               | none (evictions are kvd's, not seen); stored  |
|                                          | events as the CPU manager's, medium "KVD",    |
|                                          | a hash another engine committed first too     |
|                                          | (the commit's answer is not waited for)       |
| LRU order by touch()                     | kvd's own LRU, refreshed by lookups, loads,   |
|                                          | commits and touch() (one LOOKUP, folded into  |
|                                          | the lookup that follows it, else at the next  |
|                                          | call, at most every touch_refresh_ms a chain; |
|                                          | touch() is a prefix, as vLLM's chains are)    |
| any unheld block may be evicted          | leaf first: a block whose child (as touch()   |
|                                          | saw the chain) is cached goes after it; these |
|                                          | scenarios touch no chain, as the CPU test     |
| prepare_store([6, 7, 8]) evicts [2,3,4]  | evicts 3 of the 4 unheld blocks [2, 3, 4, 5]: |
|                                          | prepare_load's lookups made 2, 3 recent       |
| capacity: num_blocks of this manager     | kvd's pool (and quotas), shared by engines    |
| ARC policy internals (t1, t2, b1, b2,    | not applicable: kvd has one policy; the ARC   |
| target_t1_size)                          | tests' observable answers are checked         |

Beyond those: the lookup lease, load pins counted per prepare_load,
chain parents, two engines storing one hash, a kvd that stops or
restarts (boot_id), and no ref left held.
"""
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kvdtest import BUILD, Kvd, need_vllm  # noqa: E402

need_vllm()
if not os.path.exists(os.path.join(BUILD, "python", "kvd", "vllm.py")):
    print("SKIP: the kvd Python package is not built (python3-dev)", file=sys.stderr)
    sys.exit(77)
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import kvd  # noqa: E402
from kvd.vllm import KvdLoadStoreSpec, KvdOffloadingManager  # noqa: E402
from vllm.v1.kv_offload.reuse_manager import FilterReusedOffloadingManager  # noqa: E402

BLOCK_SIZE = 256
GEOM = kvd.opaque_geometry(8, 256 << 10, BLOCK_SIZE)        # 2 MiB blocks
POOL = "8M"                                                 # 4 of them


def to_hashes(ints):
    return [hashlib.sha256(str(i).encode()).digest() for i in ints]


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
def k():
    with Kvd(pool=POOL) as k:
        yield k
        assert k.kvctl("check", check=False).returncode == 0, k.tail()


def make(k, model="m", **kw):
    kw.setdefault("lookup_lease_ms", 0)
    kw.setdefault("enable_events", True)
    return KvdOffloadingManager(
        lambda: kvd.Client(model, socket_path=k.socket, **GEOM), BLOCK_SIZE, **kw)


def held(k):
    return sum(ns["blocks_used"] for ns in k.kvctl("status", "--json")["namespaces"])


def verify_store_output(out, to_store):
    assert out is not None
    assert out.block_hashes_to_store == to_hashes(to_store)
    assert out.block_hashes_evicted == []
    spec = out.store_spec
    assert isinstance(spec, KvdLoadStoreSpec) and spec.medium() == "KVD"
    ids = list(spec.block_ids)
    assert len(ids) == len(to_store) and len(set(ids)) == len(ids)
    assert all(0 <= i < 4 for i in ids)
    return dict(zip(to_store, ids))


def verify_load_output(spec, expected_ids):
    assert isinstance(spec, KvdLoadStoreSpec)
    assert np.array_equal(spec.block_ids, np.array(expected_ids, dtype=np.int64))


def verify_events(events, expected_stores=()):
    stores = []
    for e in events:
        assert e.medium == "KVD" and e.block_size == BLOCK_SIZE
        assert not e.removed
        stores.append(set(e.block_hashes))
    assert tuple(stores) == tuple(set(to_hashes(s)) for s in expected_stores)


def present(m, ints):
    return [i for i in ints if m.lookup(to_hashes([i])) == 1]


# ------------------------------------------- test_cpu_manager.py's scenarios
def test_cpu_manager(k):
    m = make(k)
    ids = verify_store_output(m.prepare_store(to_hashes([1, 2])), [1, 2])
    assert m.lookup(to_hashes([1, 2])) == 0                 # not ready
    assert list(m.take_events()) == []
    m.complete_store(to_hashes([1, 2]))
    verify_events(m.take_events(), expected_stores=({1, 2},))
    assert m.lookup(to_hashes([1])) == 1
    assert m.lookup(to_hashes([1, 2])) == 2
    assert m.lookup(to_hashes([1, 2, 3])) == 2

    # prepare store [2, 3, 4, 5] -> 2 is stored; kvd evicts one block (1)
    ids.update(verify_store_output(m.prepare_store(to_hashes([2, 3, 4, 5])), [3, 4, 5]))
    verify_events(m.take_events())                          # no eviction events
    assert m.prepare_store(to_hashes([1, 6])) is None       # no space
    m.complete_store(to_hashes([2, 3, 4, 5]))
    assert present(m, [1]) == []                            # 1 was evicted

    verify_load_output(m.prepare_load(to_hashes([2, 3])), [ids[2], ids[3]])
    assert m.prepare_store(to_hashes([6, 7, 8])) is None    # 2, 3 being loaded
    m.complete_load(to_hashes([2, 3]))

    ids.update(verify_store_output(m.prepare_store(to_hashes([6, 7, 8])), [6, 7, 8]))
    m.complete_store(to_hashes([6, 7, 8]))
    assert len(present(m, [2, 3, 4, 5])) == 1               # 3 of them evicted
    m.touch(to_hashes([5, 6, 7]))

    verify_store_output(m.prepare_store(to_hashes([9])), [9])
    m.complete_store(to_hashes([7, 9]), success=False)
    assert m.lookup(to_hashes([7])) == 1                    # 7 still stored
    assert m.lookup(to_hashes([9])) == 0
    verify_events(m.take_events(), expected_stores=({3, 4, 5}, {6, 7, 8}))
    m.close()
    assert held(k) == 0


def test_already_stored_block_not_evicted_during_prepare_store(k):
    m = make(k)
    m.prepare_store(to_hashes([1, 2]))
    m.complete_store(to_hashes([1, 2]))
    m.touch(to_hashes([1]))
    verify_store_output(m.prepare_store(to_hashes([2, 3, 4, 5])), [3, 4, 5])
    m.complete_store(to_hashes([2, 3, 4, 5]))
    assert m.lookup(to_hashes([2])) == 1
    assert present(m, [1, 2, 3, 4, 5]) == [2, 3, 4, 5]


def test_touch_refreshes_lru(k):
    """touch() keeps a block warm in kvd's LRU, as in the CPU manager:
    refreshed at the next call when no lookup takes it along."""
    clock = Clock()
    m = make(k, clock=clock)
    for i in (1, 2, 3, 4):                                  # 1 the oldest
        m.prepare_store(to_hashes([i]))
        m.complete_store(to_hashes([i]))
    m.touch(to_hashes([2]))             # committed just now: fresh enough
    m.lookup(to_hashes([7]))
    clock.t += 1.5                      # past touch_refresh_ms
    m.touch(to_hashes([1]))
    verify_store_output(m.prepare_store(to_hashes([5])), [5])
    m.complete_store(to_hashes([5]))
    assert present(m, [1, 2, 3, 4, 5]) == [1, 3, 4, 5]     # 2 went, not 1
    m.close()
    assert held(k) == 0


def test_touch_then_lookup_is_one_lookup(k):
    """The scheduler's touch(whole chain) + lookup(its tail) is one LOOKUP
    (and a RELEASE nothing waits for), with the lookup's answer."""
    m = make(k, lookup_lease_ms=2000)
    hs = to_hashes([1, 2, 3])
    m.prepare_store(hs)
    m.touch(hs)
    m.complete_store(hs)
    c = m.client()
    ops = c.stats()["ops"]
    m.touch(hs)
    assert m.lookup(hs[1:]) == 2
    assert c.stats()["ops"] - ops == 1 + 2                  # STATS, LOOKUP, RELEASE
    verify_load_output(m.prepare_load(hs[1:]), present_ids(m, hs)[1:])
    m.complete_load(hs[1:])
    # a chain kvd lacks the head of: the tail is still found
    m.touch(to_hashes([9]) + hs[1:])
    assert m.lookup(hs[1:]) == 2
    m.close()
    assert held(k) == 0


def present_ids(m, hashes):
    ids = m.client().lookup([h[:16] for h in hashes])
    m.client().release(ids)
    return ids


def test_eviction_with_load(k):
    """test_arc_manager_eviction_with_load: loading blocks are not evicted."""
    m = make(k)
    ids = verify_store_output(m.prepare_store(to_hashes([1, 2, 3, 4])), [1, 2, 3, 4])
    m.complete_store(to_hashes([1, 2, 3, 4]))
    verify_load_output(m.prepare_load(to_hashes([2, 3])), [ids[2], ids[3]])
    assert m.prepare_store(to_hashes([5, 6, 7])) is None
    m.complete_load(to_hashes([2, 3]))
    verify_store_output(m.prepare_store(to_hashes([5, 6, 7])), [5, 6, 7])


def test_failed_store(k):
    """test_arc_manager_failed_store: a failed store leaves nothing."""
    m = make(k)
    m.prepare_store(to_hashes([1, 2, 3, 4]))
    m.complete_store(to_hashes([1, 2, 3, 4]))
    verify_store_output(m.prepare_store(to_hashes([5])), [5])
    m.complete_store(to_hashes([5]), success=False)
    assert m.lookup(to_hashes([5])) == 0
    assert len(present(m, [1, 2, 3, 4])) == 3               # one was evicted for 5
    m.close()
    assert held(k) == 0


def test_full_scenario(k):
    """test_arc_manager_full_scenario's observable answers."""
    m = make(k)
    m.prepare_store(to_hashes([1, 2]))
    m.complete_store(to_hashes([1, 2]))
    assert m.prepare_store(to_hashes([3, 4, 5])) is not None
    m.complete_store(to_hashes([3, 4, 5]))
    assert len(present(m, [1, 2])) == 1                     # one went for 3, 4, 5
    assert m.prepare_store(to_hashes([6])) is not None
    m.complete_store(to_hashes([6]))
    assert m.lookup(to_hashes([6])) == 1
    assert len(list(m.take_events())) == 3


def test_ghost_list_bounds(k):
    """test_arc_manager_ghost_list_bounds: many stores into 4 blocks."""
    m = make(k)
    m.prepare_store(to_hashes([1, 2]))
    m.complete_store(to_hashes([1, 2]))
    for i in range(3, 20):
        verify_store_output(m.prepare_store(to_hashes([i])), [i])
        m.complete_store(to_hashes([i]))
    assert len(present(m, range(1, 20))) == 4
    m.close()
    assert held(k) == 0


def test_filter_reused_manager(k):
    manager = FilterReusedOffloadingManager(backing=make(k), store_threshold=2,
                                            max_tracker_size=3)
    assert manager.lookup(to_hashes([1, 2])) == 0
    out = manager.prepare_store(to_hashes([1, 2]))
    assert out is not None and out.block_hashes_to_store == []
    assert manager.lookup(to_hashes([1])) == 0
    out = manager.prepare_store(to_hashes([1, 2]))
    assert out is not None and out.block_hashes_to_store == to_hashes([1])
    assert manager.lookup(to_hashes([3, 4])) == 0
    assert to_hashes([2])[0] not in manager.counts
    assert manager.lookup(to_hashes([2])) == 0
    assert manager.counts.get(to_hashes([2])[0]) == 1
    out = manager.prepare_store(to_hashes([2]))
    assert out is not None and out.block_hashes_to_store == []
    manager.complete_store(to_hashes([1]))
    assert manager.lookup(to_hashes([1])) == 1


# ------------------------------------------------------- kvd's own semantics
def test_lookup_lease(k):
    clock = Clock()
    m = make(k, lookup_lease_ms=2000, clock=clock)
    m.prepare_store(to_hashes([1, 2]))
    m.complete_store(to_hashes([1, 2]))
    assert m.lookup(to_hashes([1, 2])) == 2                 # pinned for 2 s
    assert m.lookup(to_hashes([1, 2, 3])) == 2              # no second ref
    assert m.client().stats()["client_refs"] == 2
    assert m.prepare_store(to_hashes([3, 4, 5])) is None    # 1, 2 are pinned
    clock.t += 1.5
    assert m.lookup(to_hashes([1])) == 1                    # refreshes 1 only
    clock.t += 1.0                                          # 2's lease is over
    assert m.prepare_store(to_hashes([3, 4, 5])) is not None
    assert m.lookup(to_hashes([2])) == 0                    # evicted for 3, 4, 5
    assert m.lookup(to_hashes([1])) == 1
    clock.t += 5
    m.complete_store(to_hashes([3, 4, 5]))
    assert m.client().stats()["client_refs"] == 0


def test_lease_becomes_load_pin(k):
    clock = Clock()
    m = make(k, lookup_lease_ms=100, clock=clock)
    ids = verify_store_output(m.prepare_store(to_hashes([1, 2])), [1, 2])
    m.complete_store(to_hashes([1, 2]))
    assert m.lookup(to_hashes([1, 2])) == 2
    spec1 = m.prepare_load(to_hashes([1, 2]))               # takes the lease pins
    spec2 = m.prepare_load(to_hashes([1, 2]))               # one more ref each
    verify_load_output(spec1, [ids[1], ids[2]])
    verify_load_output(spec2, [ids[1], ids[2]])
    assert spec1.boot_id == m.client().boot_id
    clock.t += 10                                           # leases don't matter now
    assert m.client().stats()["client_refs"] == 4
    m.complete_load(to_hashes([1, 2]))
    assert m.client().stats()["client_refs"] == 2
    m.complete_load(to_hashes([1, 2]))
    assert m.client().stats()["client_refs"] == 0
    m.complete_load(to_hashes([1, 2]))                      # unknown: ignored


def test_prepare_load_of_a_lost_block(k):
    m = make(k)
    m.prepare_store(to_hashes([1]))
    m.complete_store(to_hashes([1]))
    k.kvctl("evict")
    spec = m.prepare_load(to_hashes([1]))
    assert list(spec.block_ids) == [-1]


def test_chain_parents(k):
    m = make(k)
    m.prepare_store(to_hashes([1, 2, 3]))
    m.touch(to_hashes([1, 2, 3]))                           # as the scheduler does
    m.complete_store(to_hashes([3, 2, 1]))                  # in any order (a set)
    tree = k.kvctl("--json", "prefix", "--tree")["tree"]
    assert [n["depth"] for n in tree] == [0, 1, 2]


def test_dedup_across_engines(k):
    a, b = make(k, model="x"), make(k, model="x")
    assert a.prepare_store(to_hashes([1])) is not None
    assert b.prepare_store(to_hashes([1])) is not None      # neither committed yet
    a.complete_store(to_hashes([1]))
    b.complete_store(to_hashes([1]))                        # deduplicated
    verify_events(a.take_events(), expected_stores=({1},))
    # b's commit was deduplicated to a's block; its answer is not waited
    # for, so b reports the block stored too (it is: by a)
    verify_events(b.take_events(), expected_stores=({1},))
    assert b.lookup(to_hashes([1])) == 1
    out = b.prepare_store(to_hashes([1, 2]))                # 1 is there already
    assert out.block_hashes_to_store == to_hashes([2])
    b.complete_store(to_hashes([2]))
    a.close()
    b.close()
    assert held(k) == 0


def test_requests_in_chunks(k, monkeypatch):
    """Long lists go to kvd in several requests (kvd.vllm.CHUNK each)."""
    import kvd.vllm
    monkeypatch.setattr(kvd.vllm, "CHUNK", 2)
    m = make(k)
    verify_store_output(m.prepare_store(to_hashes([1, 2, 3])), [1, 2, 3])
    m.touch(to_hashes([1, 2, 3]))
    m.complete_store(to_hashes([1, 2, 3]))
    verify_events(m.take_events(), expected_stores=({1, 2, 3},))
    assert m.lookup(to_hashes([1, 2, 3, 4])) == 3
    assert len(m.prepare_load(to_hashes([1, 2, 3])).block_ids) == 3
    m.complete_load(to_hashes([1, 2, 3]))
    tree = k.kvctl("--json", "prefix", "--tree")["tree"]
    assert [n["depth"] for n in tree] == [0, 1, 2]          # parents across chunks
    m.prepare_load(to_hashes([1]))                          # 1 free, 2 evictable
    assert m.prepare_store(to_hashes([4, 5, 6, 7])) is None  # 2nd chunk: no room
    assert m.client().stats()["client_refs"] == 1           # the 1st's given back
    m.complete_load(to_hashes([1]))
    m.close()
    assert held(k) == 0


def test_short_hash(k):
    m = make(k)
    with pytest.raises(ValueError):
        m.lookup([b"1"])


def test_events_off(k):
    m = make(k, enable_events=False)
    m.prepare_store(to_hashes([1]))
    m.complete_store(to_hashes([1]))
    assert list(m.take_events()) == []


def test_kvd_stops_and_restarts(k):
    m = make(k)
    m.prepare_store(to_hashes([1, 2]))
    m.complete_store(to_hashes([1, 2]))
    old_boot = m.client().boot_id
    pending = m.prepare_store(to_hashes([3]))
    assert pending.block_hashes_to_store == to_hashes([3])
    k.stop()
    assert m.lookup(to_hashes([1, 2])) == 0                 # never raises
    assert m.prepare_store(to_hashes([4])) is None
    assert list(m.prepare_load(to_hashes([1])).block_ids) == [-1]
    m.complete_store(to_hashes([3]))                        # its kvd is gone
    m.complete_load(to_hashes([1]))
    k.start()
    m._retry_at = 0                                         # skip the back-off
    assert m.lookup(to_hashes([1])) == 0                    # a new, empty kvd
    assert m.client().boot_id != old_boot
    out = m.prepare_store(to_hashes([1]))
    verify_store_output(out, [1])
    assert out.store_spec.boot_id == m.client().boot_id
    m.complete_store(to_hashes([1]))
    assert m.lookup(to_hashes([1])) == 1


def test_store_completed_while_a_call_is_unanswered(k):
    """A call timed out (kvd stopped): the commit of a store written whole
    meanwhile is refused for now; it is made at a later call, and no
    ref stays held for the engine's life."""
    import signal
    m = KvdOffloadingManager(
        lambda: kvd.Client("m", socket_path=k.socket, call_timeout_ms=200, **GEOM),
        BLOCK_SIZE, lookup_lease_ms=0)
    m.prepare_store(to_hashes([1, 2]))
    os.kill(k.proc.pid, signal.SIGSTOP)
    try:
        assert m.prepare_store(to_hashes([3])) is None      # times out
        m.complete_store(to_hashes([1, 2]))                 # refused for now
    finally:
        os.kill(k.proc.pid, signal.SIGCONT)
    for _ in range(100):
        if m.lookup(to_hashes([1, 2])) == 2:
            break
    assert m.lookup(to_hashes([1, 2])) == 2                 # committed later
    m.complete_load([])
    m.touch([])
    assert m.client().stats()["client_refs"] == 0
    m.close()
    assert held(k) == 0


def test_restart_between_prepare_and_complete(k):
    m = make(k)
    m.prepare_store(to_hashes([1]))
    k.restart()                                             # before complete_store
    m.lookup(to_hashes([9]))                                # sees ECONNRESET
    m._retry_at = 0
    m.lookup(to_hashes([9]))                                # reconnects
    m.complete_store(to_hashes([1]))                        # never commits old ids
    assert m.lookup(to_hashes([1])) == 0
    assert held(k) == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
