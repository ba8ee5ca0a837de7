# SPDX-License-Identifier: MIT
"""Retention from Python (kvd.Seq.retain, kv_seq_retain(3)) on a real kvd.

A Seq's committed blocks pinned by its close() show in kvctl status's
pinned_blocks; end= keeps the pin to the head of the prompt; kvctl
unpin by the hash of the last block drops them; bad values raise
kvd.Error EINVAL at once; a pin past the namespace's limit (half its
blocks) makes close() raise EDQUOT with kvd's reason, the Seq closed
and nothing pinned.
"""
import errno
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvdtest import GEOM, Kvd, client  # noqa: E402,F401

import kvd  # noqa: E402


@pytest.fixture
def k():
    with Kvd("64M") as d:
        yield d


def ns_row(k):
    (row,) = k.kvctl("--json", "status")["namespaces"]
    return row


def committed(k):
    (row,) = k.kvctl("--json", "prefix")["namespaces"]
    return row["committed_blocks"]


def test_constants():
    assert kvd.PRIO_DEFAULT == 35 and kvd.PRIO_MAX == 100
    assert kvd.PIN_MAX_MS == 7 * 24 * 3600 * 1000


def test_pinned_after_close(k):
    tokens = list(range(40))                    # 2 full blocks and a partial
    with client(k) as c:
        s = c.seq_open(tokens)
        s.commit()
        assert s.retain(priority=100, pin_ms=60000) is None
        s.close()
        assert s.closed
        assert c.stats()["client_blocks"] == 0  # released: the pins hold them
    assert committed(k) == 2
    assert ns_row(k)["pinned_blocks"] == committed(k)
    last = kvd.hash_blocks(tokens, 16)[-1].hex()
    r = k.kvctl("--json", "unpin", last)
    assert r["prefix_blocks"] == 2 and r["changed"] == 2
    assert ns_row(k)["pinned_blocks"] == 0


def test_end_and_fork(k):
    with client(k) as c:
        s = c.seq_open(list(range(100, 164)))  # 4 full blocks
        s.commit()
        s.retain(pin_ms=60000, end=16 * 2 + 5)  # the first 2 only
        f = s.fork()                            # inherits it
        s.close()
        assert ns_row(k)["pinned_blocks"] == 2
        f.close()                               # the same 2: pinned once
        assert ns_row(k)["pinned_blocks"] == 2
        t = c.seq_open(list(range(200, 240)))
        t.commit()
        t.retain(pin_ms=60000)
        t.retain()                              # all zero: cleared
        t.close()
        assert ns_row(k)["pinned_blocks"] == 2


def test_bad_values(k):
    with client(k) as c:
        with c.seq_open(list(range(40))) as s:
            s.commit()
            for bad in (dict(priority=kvd.PRIO_MAX + 1),
                        dict(pin_ms=kvd.PIN_MAX_MS + 1)):
                with pytest.raises(kvd.Error) as e:
                    s.retain(**bad)
                assert e.value.errno == errno.EINVAL
                assert "kv_seq_retain" in str(e.value)
            with pytest.raises(ValueError):
                s.retain(pin_ms=-1)
        with pytest.raises(kvd.Error) as e:
            s.retain(priority=1)                # closed
        assert e.value.errno == errno.EBADF
    assert ns_row(k)["pinned_blocks"] == 0


def test_pin_limit_raised_by_close():
    with Kvd("4M") as k, client(k) as c:     # 256 blocks: pins keep 128
        s = c.seq_open(list(range(130 * 16 + 1)))
        s.commit()
        s.retain(pin_ms=60000)
        with pytest.raises(kvd.Error) as e:
            s.close()
        assert e.value.errno == errno.EDQUOT
        assert "pin limit" in str(e.value)
        assert s.closed and c.stats()["client_blocks"] == 0
        assert ns_row(k)["pinned_blocks"] == 0
        tokens = list(range(1000, 1000 + 130 * 16))
        with pytest.raises(kvd.Error) as e:     # the with's end: the same
            with c.seq_open(tokens) as s:
                s.commit()
                s.retain(pin_ms=60000)
        assert e.value.errno == errno.EDQUOT and s.closed
        with pytest.raises(KeyError):           # not hidden by the close's
            with c.seq_open(tokens) as s:
                s.commit()
                s.retain(pin_ms=60000)
                raise KeyError("the body's")
        assert s.closed and ns_row(k)["pinned_blocks"] == 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
