# SPDX-License-Identifier: MIT
"""kvctl metrics and kvd --metrics-listen, read by a real Prometheus parser.

A private kvd serving /metrics on a free local port; a client allocates,
commits and looks up blocks; then `kvctl metrics` and an HTTP GET are
parsed with prometheus_client's text parser (python3-prometheus-client)
and checked: the pool's bytes, blocks by state, hit and looked-up tokens,
counters that never go back, cumulative histogram buckets.
"""
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvdtest import BUILD, Kvd, client  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser")
import kvd  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def k():
    port = free_port()
    with Kvd("64M", "--metrics-listen", f"127.0.0.1:{port}") as d:
        d.port = port
        yield d


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def value(fams, name, suffix="", **labels):
    """The one sample of family @name (+ @suffix) with @labels."""
    got = [s.value for s in fams[name].samples
           if s.name == name + suffix and
           all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, fams[name].samples)
    return got[0]


def activity(k, first=0):
    """4 blocks committed, looked up (4 hit of 5 asked), released."""
    hashes = kvd.hash_blocks(list(range(first, first + 64)), 16)
    with client(k) as a:
        ids = a.alloc(4)
        a.commit([(ids[i], hashes[i], hashes[i - 1] if i else None)
                  for i in range(4)])
        hits = a.lookup(hashes + [bytes(16)])
        assert len(hits) == 4
        a.release(hits)
        a.release(ids)


def check_sane(fams, k):
    assert value(fams, "kvd_pool_bytes") == 64 << 20
    used = value(fams, "kvd_pool_pages", state="used")
    free = value(fams, "kvd_pool_pages", state="free")
    assert used + free == 32 and used >= 1
    assert fams["kvd_prefix_hit_tokens"].type == "counter"
    hit = value(fams, "kvd_prefix_hit_tokens", "_total", model="m")
    looked = value(fams, "kvd_prefix_lookup_tokens", "_total", model="m")
    miss = value(fams, "kvd_prefix_miss_tokens", "_total", model="m")
    assert hit == 64 and looked >= 64 and miss == looked - hit
    assert value(fams, "kvd_namespace_blocks", model="m", state="cached") == 4
    assert value(fams, "kvd_requests", "_total", op="LOOKUP") >= 1
    assert value(fams, "kvd_requests", "_total", op="COMMIT") >= 1
    assert fams["kvd_request_duration_seconds"].type == "histogram"
    check_histogram(fams["kvd_request_duration_seconds"])


def check_histogram(fam):
    """Per op: buckets cumulative, in order of le, +Inf == _count."""
    ops = {}
    for s in fam.samples:
        ops.setdefault(s.labels["op"], []).append(s)
    assert "ALLOC" in ops and "LOOKUP" in ops
    for op, ss in ops.items():
        b = [(float(s.labels["le"]), s.value) for s in ss
             if s.name.endswith("_bucket")]
        assert [le for le, _ in b] == sorted(le for le, _ in b)
        assert len(b) == 17 and b[-1][0] == float("inf")
        assert all(x <= y for (_, x), (_, y) in zip(b, b[1:])), op
        count = [s.value for s in ss if s.name.endswith("_count")]
        assert count == [b[-1][1]]
    # the first SQE of each opcode is timed: LOOKUP has a sample
    assert [s.value for s in ops["LOOKUP"] if s.name.endswith("_count")][0] >= 1


def counters(fams):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fams.values() if f.type in ("counter", "histogram")
            for s in f.samples}


def test_kvctl_metrics_parse_and_monotonic(k):
    activity(k)
    first = families(k.kvctl("metrics"))
    check_sane(first, k)
    activity(k, 1000)
    second = families(k.kvctl("metrics"))
    a, b = counters(first), counters(second)
    assert a.keys() <= b.keys()
    assert all(b[key] >= v for key, v in a.items()), \
        [key for key, v in a.items() if b[key] < v]
    assert value(second, "kvd_requests", "_total", op="ALLOC") > \
        value(first, "kvd_requests", "_total", op="ALLOC")


def test_http_metrics(k):
    activity(k)
    url = f"http://127.0.0.1:{k.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    check_sane(families(text), k)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{k.port}/nope", timeout=10)
    assert e.value.code == 404


@pytest.mark.parametrize("bad", ["127.0.0.1:99999", "127.0.0.1", "x:80",
                                 "::1:80", "[::1]:0"])
def test_bad_listen_refused(tmp_path, bad):
    r = subprocess.run([os.path.join(BUILD, "kvd"), "--backend", "host",
                        "--socket", str(tmp_path / "s"),
                        "--metrics-listen", bad],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "is not ADDR:PORT" in r.stderr and bad in r.stderr
