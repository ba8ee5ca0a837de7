# SPDX-License-Identifier: MIT
"""kvd --kv-events: blocks stored and removed, in vLLM's KV-event format.

A real kvd publishes on a ZMQ PUB socket; this test subscribes with
pyzmq, decodes the msgpack batches with python3-msgpack, and checks them
against the field order of vLLM's event classes (BlockStored,
BlockRemoved in vllm/distributed/kv_events.py, read with ast from the
vendored sources when they are there, else the v0.19 order written
below): a prompt's committed blocks come as BlockStored with the
engine's own hashes chained by parent, and `kvctl evict` sends a
BlockRemoved for each.
"""
import ast
import json
import os
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvdtest import BUILD, GEOM, Kvd, VLLM_DIR, client  # noqa: E402

import kvd  # noqa: E402

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

# vLLM v0.19's fields, as msgspec encodes them (array_like, tagged)
V019 = {
    "BlockStored": ["block_hashes", "parent_block_hash", "token_ids",
                    "block_size", "lora_id", "medium", "lora_name",
                    "extra_keys"],
    "BlockRemoved": ["block_hashes", "medium"],
}


def vllm_fields():
    """Each event class's fields, in order, from the vendored sources."""
    path = os.path.join(VLLM_DIR, "vllm", "distributed", "kv_events.py")
    if not os.path.exists(path):
        return V019
    tree = ast.parse(open(path).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in V019:
            out[node.name] = [s.target.id for s in node.body
                              if isinstance(s, ast.AnnAssign)]
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def receive(sub, want, timeout=5.0):
    """Decoded events until @want of them came (or the time is up)."""
    events, end = [], time.time() + timeout
    while len(events) < want and time.time() < end:
        if not sub.poll(200):
            continue
        topic, seq, payload = sub.recv_multipart()
        assert len(seq) == 8
        batch = msgpack.unpackb(payload, raw=False)
        ts, evs = batch[0], batch[1]
        assert ts > 1.6e9 and isinstance(evs, list)
        events += [(topic.decode(), e) for e in evs]
    return events


def test_stored_then_removed():
    port = free_port()
    fields = vllm_fields()
    with Kvd("64M", "--kv-events", f"tcp://127.0.0.1:{port}") as k:
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://127.0.0.1:{port}")
        # kvctl events follows the same, as JSON lines
        follow = subprocess.Popen(
            [os.path.join(BUILD, "kvctl"), "events", "--count", "8",
             f"tcp://127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)                     # the slow joiners
        tokens = list(range(1000, 1000 + 4 * 16 + 3))   # 4 full blocks
        with client(k, model="ev") as c:
            s = c.seq_open(tokens)
            s.commit()
            s.close()
        want = kvd.hash_blocks(tokens, GEOM["block_tokens"])
        stored = [e for t, e in receive(sub, len(want))
                  if e[0] == "BlockStored"]
        assert len(stored) == len(want)
        n = len(fields["BlockStored"])
        for i, e in enumerate(stored):
            # the tag, then the fields; trailing defaults left out
            assert len(e) in (n, n + 1)
            rec = dict(zip(fields["BlockStored"], e[1:]))
            assert rec["block_hashes"] == [bytes(want[i])]
            assert rec["parent_block_hash"] == (bytes(want[i - 1]) if i
                                                else None)
            assert rec["block_size"] == GEOM["block_tokens"]
            assert rec["medium"] == "CPU"   # the host backend's pool
        k.kvctl("evict")
        removed = [e for t, e in receive(sub, len(want))
                   if e[0] == "BlockRemoved"]
        got = [h for e in removed
               for h in dict(zip(fields["BlockRemoved"], e[1:]))
               ["block_hashes"]]
        assert sorted(got) == sorted(bytes(h) for h in want)
        out, _ = follow.communicate(timeout=10)
        lines = [json.loads(x) for x in out.splitlines()]
        assert follow.returncode == 0 and len(lines) == 2 * len(want)
        assert [x["type"] for x in lines[:len(want)]] == \
            ["BlockStored"] * len(want)
        assert lines[0]["topic"] == "ev" and lines[0]["block_size"] == 16
        assert lines[1]["parent_block_hash"] == bytes(want[0]).hex()
        assert {x["block_hashes"][0] for x in lines[len(want):]} == \
            {bytes(h).hex() for h in want}
        sub.close(0)
        ctx.term()


def test_bad_endpoint_refused():
    with pytest.raises(RuntimeError):
        Kvd("64M", "--kv-events", "udp://nowhere")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
