# SPDX-License-Identifier: MIT
"""The kvd Python package's binding (python/kvd/_kvd.c) on a real kvd.

Every call goes to a private kvd (kvdtest.Kvd) on the host backend:
connect and its refusals, blocks, the prefix cache, kv_seq, the pool's
bytes seen from two processes, errors as kvd.Error (an OSError with
errno and reason), the GIL released while a call waits, and what
happens when kvd goes away.
"""
import errno
import multiprocessing as mp
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvdtest import GEOM, Kvd, client  # noqa: E402,F401

import kvd  # noqa: E402


@pytest.fixture
def k():
    with Kvd("64M") as d:
        yield d


def test_error_is_oserror():
    assert issubclass(kvd.Error, OSError)


def test_connect_refused_with_reason(k):
    with pytest.raises(kvd.Error) as e:
        client(k, layers=0)
    assert e.value.errno == errno.EINVAL
    assert "geometry" in str(e.value)
    with pytest.raises(kvd.Error) as e:
        client(k, layers=2000)              # kvd's own check, its reason
    assert e.value.errno == errno.EINVAL
    assert "1024" in str(e.value)
    with pytest.raises(ValueError):
        client(k, dtype="fp4")
    with pytest.raises(kvd.Error) as e:
        kvd.Client("m", socket_path=os.path.join(k.dir, "nope.sock"), **GEOM)
    assert e.value.errno in (errno.ENOENT, errno.ECONNREFUSED)


def test_pool_info_and_boot_id(k):
    with client(k) as c:
        i = c.pool_info()
        assert i["backend"] == "host" and c.backend == "host"
        assert i["block_bytes"] == 2 * 2 * 2 * 16 * 64 * 2 == c.block_bytes
        assert i["max_blocks"] == c.max_blocks == i["pool_bytes"] // c.block_bytes
        assert c.boot_id and i["boot_id"] == c.boot_id
        with client(k, model="other") as c2:
            assert c2.boot_id == c.boot_id      # one kvd run
    boot = c.boot_id
    k.restart()
    with client(k) as c:
        assert c.boot_id != boot                # another run


def test_alloc_release_ref_errors(k):
    with client(k) as c:
        ids = c.alloc(3)
        assert len(set(ids)) == 3
        assert c.ref(ids[:1]) == 1
        assert c.release(ids) == 3
        assert c.release(ids[:1]) == 1          # the second ref
        with pytest.raises(kvd.Error) as e:
            c.release(ids[:1])                  # not held any more
        assert e.value.errno == errno.EPERM
        with pytest.raises(kvd.Error) as e:
            c.alloc(c.max_blocks + 1)
        assert e.value.errno in (errno.E2BIG, errno.ENOSPC)
        with pytest.raises(ValueError):
            c.release([-1])
        assert c.stats()["client_refs"] == 0


def test_deferred_release(k):
    """release(wait=False): no round trip; reaped by the next call."""
    with client(k) as c:
        for _ in range(3000):               # more than the SQ holds at once
            ids = c.alloc(2)
            assert c.release(ids, wait=False) == 2
        assert c.stats()["client_refs"] == 0    # reaped before STATS
        ids = c.alloc(1)
        c.release(ids, wait=False)
        c.release(ids, wait=False)          # not held any more: refused
        assert c.flush() == 1
        d = c.deferred
        assert d["in_flight"] == 0 and d["last_errno"] == errno.EPERM
        s = c.seq_open(list(range(20)))     # a Seq call after deferred ones
        c.release(c.alloc(1), wait=False)
        s.close()
        assert c.stats()["client_refs"] == 0


def test_commit_release(k):
    """commit(release=True[, wait=False]): committed and let go at once."""
    hashes = kvd.hash_blocks(list(range(48)), 16)
    with client(k) as a, client(k) as b:
        ids = a.alloc(2)
        got = a.commit([(ids[0], hashes[0], None), (ids[1], hashes[1], hashes[0])],
                       release=True)
        assert got == [(ids[0], False), (ids[1], False)]
        assert a.stats()["client_refs"] == 0
        mine = b.alloc(2)
        assert b.commit([(mine[0], hashes[0], None),           # a dedup
                         (mine[1], hashes[2], hashes[1])],
                        release=True, wait=False) is None
        hits = b.lookup(hashes)                 # behind it on the ring
        assert hits[:2] == ids and len(hits) == 3
        b.release(hits)
        assert b.stats()["client_refs"] == 0 and b.flush() == 0
        with pytest.raises(ValueError):
            b.commit([(0, hashes[0], None)], wait=False)
        with pytest.raises(kvd.Error) as e:     # not held: refused, answered
            b.commit([(ids[0], hashes[1], None)], release=True)
        assert e.value.errno == errno.EPERM


def test_prefix_commit_lookup_dedup(k):
    toks = list(range(64))
    hashes = kvd.hash_blocks(toks, 16)
    assert len(hashes) == 4 and all(len(h) == 16 for h in hashes)
    assert kvd.hash_blocks(toks[:63], 16) == hashes[:3]
    with client(k) as a, client(k) as b:
        ids = a.alloc(4)
        ent = [(ids[i], hashes[i], hashes[i - 1] if i else None)
               for i in range(4)]
        assert a.commit(ent) == [(i, False) for i in ids]
        hits = b.lookup(hashes + [bytes(16)])
        assert hits == ids                      # the prefix, refs taken
        # b commits the same hashes: deduplicated to a's blocks
        mine = b.alloc(2)
        out = b.commit([(mine[0], hashes[0], None),
                        (mine[1], hashes[1], hashes[0])])
        assert out == [(ids[0], True), (ids[1], True)]
        b.release(hits + [ids[0], ids[1]])
        h, got = b.alloc_prefix(b"".join(hashes[:2]), 5)   # packed hashes
        assert h == 2 and got[:2] == ids[:2] and len(got) == 5
        b.release(got)
        a.release(ids)
        st = a.stats()
        assert st["committed_blocks"] == 4 and st["cached_blocks"] == 4
        with pytest.raises(ValueError):
            a.lookup([b"short"])
        with pytest.raises(kvd.Error) as e:
            a.alloc_prefix(hashes, 2)           # more hashes than blocks
        assert e.value.errno == errno.EINVAL


def _child_reads(sock, bid, q):
    with kvd.Client("m", socket_path=sock, **GEOM) as c:
        mem = c.block_memory(bid)
        q.put(bytes(mem[:8]))
        del mem


def test_pool_memory_across_processes(k):
    with client(k) as c:
        bid = c.alloc(1)[0]
        c.block_addrs([bid])                    # maps its extent
        mem = c.pool_memory()
        assert len(mem) == c.pool_bytes and not mem.readonly
        off = bid * c.block_bytes
        mem[off:off + 8] = b"kvdbytes"
        q = mp.get_context("spawn").Queue()
        p = mp.get_context("spawn").Process(target=_child_reads,
                                            args=(k.socket, bid, q))
        p.start()
        assert q.get(timeout=30) == b"kvdbytes"
        p.join(30)
        assert p.exitcode == 0
        with pytest.raises(kvd.Error) as e:
            c.close()                           # a view is alive
        assert e.value.errno == errno.EBUSY
        del mem
        c.close()
        assert c.closed
        c.close()                               # idempotent
        with pytest.raises(kvd.Error) as e:
            c.alloc(1)
        assert e.value.errno == errno.EBADF


def test_torch_view(k):
    torch = pytest.importorskip("torch")
    with client(k) as c:
        ids = c.alloc(2)
        c.block_addrs(ids)
        pool = torch.frombuffer(c.pool_memory(), dtype=torch.uint8)
        blocks = pool[:c.max_blocks * c.block_bytes].view(c.max_blocks, c.block_bytes)
        blocks[ids[1]] = 7
        assert bytes(c.block_memory(ids[1])[:4]) == b"\x07" * 4
        del pool, blocks


def test_seq(k):
    with client(k) as a:
        s = a.seq_open(list(range(40)))
        assert len(s) == 40 and s.hit_tokens == 0
        assert len(s.block_table) == 3
        assert s.commit() is None
        s.append(list(range(40, 48)))
        assert len(s) == 48
        f = s.fork()
        assert f.block_table[:2] == s.block_table[:2]
        f.close()
        s.close()
        assert s.closed and s.block_table == []
        with pytest.raises(kvd.Error) as e:
            s.append([1])
        assert e.value.errno == errno.EBADF
        t = a.seq_open(list(range(40)))
        assert t.hit_tokens == 32                # two full blocks cached
        assert t.hits == dict(pool=2, host=0, disk=0)
        # the Client closes its open Seqs
    assert t.closed


def test_seq_policies(k):
    with client(k, max_context=64) as a:
        info = a.ctx_info()
        assert info == dict(max_context=64, default="none",
                            supported=["none", "truncate", "window", "sinks"])
        s = a.seq_open(list(range(20)), policy="sinks 4 20 bos")
        assert s.append(list(range(20, 60))) == 40
        r = s.range()
        assert r["policy"] == "sinks 4 20 bos" and r["len"] == 60
        assert r["kept"] == 24 and r["dropped"] == 36
        assert r["sink_len"] == 4
        assert r["commit_end"] == 20       # 20..59 came and 20..39 went at once
        pos = s.positions()
        assert len(pos) == len(s.block_table) * 16
        kept = [p for p in pos if p >= 0]
        assert kept == list(range(4)) + list(range(40, 60))
        cache = [p for p in s.positions(cache=True) if p >= 0]
        assert cache == list(range(24))
        s.close()
        t = a.seq_open(list(range(40)), policy="truncate")
        assert t.append(list(range(40))) == 24   # cut short at 64
        with pytest.raises(kvd.Error) as e:
            t.append([1])
        assert e.value.errno == errno.E2BIG
        t.close()
        for bad in ("window 0", "sinks 4 61", "sinks 0 8 bos"):
            with pytest.raises(kvd.Error) as e:
                a.seq_open([1, 2, 3], policy=bad)
            assert e.value.errno == errno.EINVAL
        with pytest.raises(kvd.Error) as e:
            a.seq_open([1, 2, 3], policy="sideways 3")
        assert e.value.errno == errno.EINVAL
        with pytest.raises(kvd.Error) as e:
            a.seq_open(list(range(65)))          # none: past max_context
        assert e.value.errno == errno.E2BIG
        assert a.stats()["client_blocks"] == 0


def test_opaque_namespace(k):
    g = kvd.opaque_geometry(3, 65536, 16)
    with kvd.Client("vllm-model", socket_path=k.socket, model_rev="L1",
                    **g) as o, client(k, model="vllm-model") as n:
        assert o.block_bytes == 3 * 65536
        assert o.ns_id != n.ns_id               # never shared with native
        ns = {r["model"] + "/" + r["dtype"]
              for r in k.kvctl("--json", "status")["namespaces"]}
        assert "vllm-model/opaque" in ns and "vllm-model/fp16" in ns
    for bad in (dict(g, kv_heads=2), dict(g, quant="token"),
                dict(g, head_dim=100)):
        with pytest.raises(kvd.Error) as e:
            kvd.Client("x", socket_path=k.socket, **bad)
        assert e.value.errno == errno.EINVAL


def test_gil_released_while_waiting(k):
    """A call that waits in kvd lets other Python threads run."""
    with client(k) as c:
        held = c.alloc(c.max_blocks) if False else []
        # fill the pool, then wait for a block that never comes
        n = 0
        while True:
            try:
                held += c.alloc(256)
            except kvd.Error as e:
                assert e.errno in (errno.ENOSPC, errno.EDQUOT)
                break
            n += 1
            assert n < 1000
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1
                time.sleep(0.001)

        t = threading.Thread(target=spin)
        t.start()
        before = ticks[0]
        with pytest.raises(kvd.Error) as e:
            c.alloc(1, wait_ms=600)
        assert e.value.errno == errno.ETIMEDOUT
        during = ticks[0] - before
        stop.set()
        t.join()
        assert during > 0, "the waiting call held the GIL"
        c.release(held)


def test_client_shared_by_threads(k):
    """Two threads on one Client: its lock serialises the calls."""
    with client(k) as c:
        errs = []

        def work():
            try:
                for _ in range(200):
                    c.release(c.alloc(2))
            except Exception as e:   # noqa: BLE001
                errs.append(e)

        ts = [threading.Thread(target=work) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs
        assert c.stats()["client_refs"] == 0


def test_arguments_checked():
    with pytest.raises(ValueError):
        kvd.hash_blocks([1, 2], 2 ** 32 + 16)


def test_bad_arguments(k):
    np = pytest.importorskip("numpy")
    with client(k) as c:
        for bad in (-1, 2 ** 32 + 1, 2 ** 64):
            with pytest.raises(ValueError):
                c.alloc(bad)
        with pytest.raises(ValueError):
            client(k, layers=2 ** 32 + 2)       # never truncated to 2
        with pytest.raises(TypeError):
            c.release(b"\x00")                  # bytes are not an id list
        with pytest.raises(TypeError):
            c.commit([[0, bytes(16), None]])    # an entry is a tuple
        with pytest.raises(ValueError):
            c.block_memory(-1)
        ids = c.alloc(np.int64(2))              # numpy ints are ints
        assert c.release(np.array(ids, dtype=np.uint32)) == 2
        assert c.stats()["client_refs"] == 0


def test_salt_same_hashes_as_seq(k):
    toks = list(range(32))
    with client(k) as c:
        s = c.seq_open(toks, cache_salt="é-salt")
        s.commit()
        s.close()
        hashes = kvd.hash_blocks(toks, 16, cache_salt="é-salt")
        assert hashes != kvd.hash_blocks(toks, 16)
        hits = c.lookup(hashes)
        assert len(hits) == 2                   # the Seq's own blocks
        c.release(hits)


def test_seq_freed_by_gc_inside_a_call(k):
    """A Seq in a reference cycle collected inside one of its Client's
    own calls (which holds the Client's lock) must not deadlock: its
    blocks are released by the next call."""
    import gc
    with client(k) as c:
        gc.disable()
        try:
            for _ in range(20):
                cycle = [c.seq_open(list(range(20)))]
                cycle.append(cycle)             # only the collector frees it
                del cycle
            gc.set_threshold(1)
            gc.enable()
            ids = c.alloc(64)
            c.commit([(i, kvd.hash_blocks([i] * 16, 16)[0], None) for i in ids])
        finally:
            gc.enable()
            gc.set_threshold(700)
        gc.collect()
        c.release(ids)
        assert c.stats()["client_refs"] == 0


def test_fork_child_cannot_use_or_end_the_client(k):
    with client(k) as c:
        ids = c.alloc(2)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                c.nop()
                code = 1
            except kvd.Error as e:
                code = 0 if e.errno == errno.EPERM else 2
            c.close()                           # forgets it, ends nothing
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        assert c.stats()["client_refs"] == 2    # still the parent's
        c.release(ids)


def test_with_ends_when_last_view_goes(k):
    with client(k) as c:
        mem = c.pool_memory()
    assert not c.closed                         # the view keeps it
    del mem
    assert c.closed


def test_deferred_release_with_call_timeout(k):
    c = client(k, call_timeout_ms=300)
    ids = c.alloc(2)
    os.kill(k.proc.pid, 19)                     # SIGSTOP
    try:
        c.release(ids, wait=False)
        t0 = time.monotonic()
        with pytest.raises(kvd.Error) as e:
            c.nop()
        assert e.value.errno == errno.ETIMEDOUT
        assert time.monotonic() - t0 < 5
    finally:
        os.kill(k.proc.pid, 18)                 # SIGCONT
    assert c.flush() == 0
    assert c.stats()["client_refs"] == 0
    c.close()


def test_deferred_after_a_timed_out_call(k):
    """A call timed out: libkvclient still owes its completion, which
    shares the data area. A deferred request is refused (EBUSY) until it
    came, never mixed up with it; once it came, the late blocks went back."""
    hashes = kvd.hash_blocks(list(range(16)), 16)
    c = client(k, call_timeout_ms=200)
    mine = c.alloc(1)
    os.kill(k.proc.pid, 19)                     # SIGSTOP
    try:
        with pytest.raises(kvd.Error) as e:
            c.alloc(4)
        assert e.value.errno == errno.ETIMEDOUT
        with pytest.raises(kvd.Error) as e:
            c.commit([(mine[0], hashes[0], None)], release=True, wait=False)
        assert e.value.errno == errno.EBUSY and "timed out" in str(e.value)
    finally:
        os.kill(k.proc.pid, 18)                 # SIGCONT
    for _ in range(100):
        try:
            assert c.commit([(mine[0], hashes[0], None)], release=True,
                            wait=False) is None
            break
        except kvd.Error as e:
            assert e.errno == errno.EBUSY
            time.sleep(0.02)
    assert c.lookup(hashes) == mine             # my block, committed
    c.release(mine)
    assert c.stats()["client_refs"] == 0        # the late 4 given back
    c.close()


def test_flush_says_kvd_went_away(k):
    c = client(k)
    ids = c.alloc(1)
    os.kill(k.proc.pid, 19)                     # SIGSTOP: never answered
    c.release(ids, wait=False)
    k.stop(9)
    with pytest.raises(kvd.Error) as e:
        c.flush()
    assert e.value.errno == errno.ECONNRESET
    c.close()


def test_kvd_gone(k):
    c = client(k)
    ids = c.alloc(1)
    k.stop()
    with pytest.raises(kvd.Error) as e:
        c.release(ids)
    assert e.value.errno == errno.ECONNRESET
    assert "kvd went away" in str(e.value)
    with pytest.raises(kvd.Error):
        c.block_addrs(ids)
    c.close()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
