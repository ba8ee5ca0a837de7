#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write the binary seed inputs of tests/fuzz/corpus/{ctrl,sqe}/.

Run from the repository root after changing an input format (fuzz_*.c);
the text seeds (conf, trace) are kept by hand.
"""
import os
import struct

KV_MAGIC = 0x3144564B
ABI_MAJOR, ABI_MINOR = 3, 0
MSG_HELLO, MSG_ADMIN = 1, 16
OP = dict(NOP=0, ALLOC=1, RELEASE=2, REF=3, STATS=4, LOOKUP=5,
          ALLOC_PREFIX=6, COMMIT=7, COW=8)
SQE, RAW, DATA, COMMITS, HASHES, PROCESS, EXIT, MOVE = range(8)
QUEUE, NOREAP = 0x20, 0x40
STATS_BYTES = 136


def put(target, name, data):
    d = os.path.join("tests/fuzz/corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- sqe: a setup byte, then commands (fuzz_sqe.c) ----

def cmd(client, action, flags=0):
    return bytes([client | action << 2 | flags])


def sqe(client, op, nr, off, args0=0, args1=0, wait_ms20=None, flags=0):
    b = cmd(client, SQE, flags)
    if wait_ms20 is not None:
        b += bytes([op | 0x80, wait_ms20])
    else:
        b += bytes([op])
    b += bytes([nr]) + struct.pack("<H", off)
    if op in (OP["LOOKUP"], OP["ALLOC_PREFIX"]):
        b += struct.pack("<H", args0)
    if op == OP["ALLOC_PREFIX"]:
        b += bytes([args1])
    return b


def raw(client, op, nr, off, args=(0, 0, 0, 0), flags=0, resv=0, sflags=0):
    s = struct.pack("<BBHIIIQ4QQ", op, sflags, resv, nr, off, 0, 0, *args, 0)
    return cmd(client, RAW, flags) + s


def commits(client, off, entries):
    b = cmd(client, COMMITS) + struct.pack("<H", off) + bytes([len(entries) - 1])
    for frm, h, parent in entries:
        b += struct.pack("<HBB", frm, h, parent)
    return b


def hashes(client, off, hs):
    return cmd(client, HASHES) + struct.pack("<H", off) + bytes([len(hs) - 1] + hs)


def process(client, adv=0, abuse=0, budget=63, flags=0):
    return cmd(client, PROCESS, flags) + bytes([adv, abuse, budget])


def move(client, src, dst, words):
    return cmd(client, MOVE) + struct.pack("<HHB", src, dst, words)


def exit_(client):
    return cmd(client, EXIT)


def sqe_seeds():
    # A chain of four blocks committed and released by client 0, hit by
    # client 1, shared (REF), made private again (COW).
    s = bytes([0])
    s += sqe(0, OP["ALLOC"], 4, 0)
    s += commits(0, 512, [(0, 1, 0), (4, 2, 1), (8, 3, 2), (12, 4, 3)])
    s += sqe(0, OP["COMMIT"], 4, 512)
    s += sqe(0, OP["RELEASE"], 4, 0)
    s += hashes(1, 1024, [1, 2, 3, 4, 5])
    s += sqe(1, OP["LOOKUP"], 5, 1024, args0=2048)
    s += sqe(1, OP["REF"], 4, 2048)
    s += sqe(1, OP["COW"], 2, 2048)
    s += sqe(1, OP["ALLOC_PREFIX"], 8, 3072, args0=1024, args1=5)
    s += sqe(1, OP["STATS"], 4, 4096)
    put("sqe", "chain", s)

    # The pool runs short: a waiter woken by frees, one that times out.
    s = bytes([0])
    s += sqe(2, OP["ALLOC"], 200, 0)
    s += sqe(0, OP["ALLOC"], 255, 0) + sqe(0, OP["ALLOC"], 255, 1024)
    s += sqe(2, OP["ALLOC"], 100, 1024, wait_ms20=10)
    s += process(2, adv=1)
    s += sqe(0, OP["RELEASE"], 255, 0) + sqe(0, OP["RELEASE"], 255, 1024)
    s += process(2, adv=1)
    s += sqe(2, OP["ALLOC"], 255, 2048, wait_ms20=2)
    s += process(2, adv=200)
    s += exit_(0) + process(2)
    put("sqe", "wait", s)

    # Reclaim across namespaces: ns 0 caches, ns 1 needs its pages.
    s = bytes([0x00])
    s += sqe(0, OP["ALLOC"], 200, 0)
    s += commits(0, 1024, [(4 * k, k + 1, k) for k in range(16)])
    s += sqe(0, OP["COMMIT"], 16, 1024)
    s += sqe(0, OP["RELEASE"], 200, 0)
    s += sqe(2, OP["ALLOC"], 60, 0)
    s += sqe(2, OP["COW"], 4, 0)
    put("sqe", "reclaim", s)

    # Malformed SQEs: every one answered, none served.
    s = bytes([0])
    s += raw(0, 9, 0, 0) + raw(0, 0xff, 1, 0) + raw(0, OP["NOP"], 1, 0)
    s += raw(0, OP["ALLOC"], 1, 8190) + raw(0, OP["ALLOC"], 0x10000, 0)
    s += raw(0, OP["ALLOC"], 1, 2) + raw(0, OP["RELEASE"], 1, 8192)
    s += raw(0, OP["LOOKUP"], 1, 0, args=(8192, 0, 0, 0))
    s += raw(0, OP["ALLOC_PREFIX"], 1, 0, args=(0, 2, 0, 0))
    s += raw(0, OP["COMMIT"], 1, 4) + raw(0, OP["STATS"], 8, 0)
    s += raw(0, OP["ALLOC"], 1, 0, sflags=1, args=(0, 0, 0, 0))
    s += raw(0, OP["ALLOC"], 1, 0, sflags=1, args=(0, 0, 0, 3600001))
    s += raw(0, OP["REF"], 1, 0, resv=1) + raw(0, OP["COW"], 1, 0, args=(1, 0, 0, 0))
    s += process(0, abuse=1) + process(0, abuse=6)
    put("sqe", "malformed", s)

    # A full SQ and CQ: queued SQEs, nothing reaped, then served.
    s = bytes([0x80])
    for k in range(20):
        s += sqe(1, OP["ALLOC"], 2, 8 * k, flags=QUEUE | NOREAP)
    s += process(1, flags=NOREAP) + process(1)
    s += move(1, 0, 4096, 16) + sqe(1, OP["REF"], 16, 4096)
    s += sqe(1, OP["COW"], 4, 4096) + exit_(1)
    put("sqe", "full-rings", s)


# ---- ctrl: a mode byte, then the message (fuzz_ctrl.c) ----

def hello(model=b"meta-llama/Llama-3.1-8B", rev=b"", geom=(32, 8, 128, 16, 0, 0, 0, 1),
          sq=64, data=65536):
    h = struct.pack("<IHHIIIIII", KV_MAGIC, ABI_MAJOR, ABI_MINOR, MSG_HELLO,
                    0, sq, data, 0, 0)
    h += model.ljust(64, b"\0") + struct.pack("<8I", *geom) + rev.ljust(32, b"\0")
    size = len(h)
    return h[:12] + struct.pack("<I", size) + h[16:]


def admin(cmd_, a0=0, a1=0):
    return struct.pack("<IHHIIIIQ", KV_MAGIC, ABI_MAJOR, ABI_MINOR, MSG_ADMIN,
                       cmd_, a0, a1, 0)


def ctrl_seeds():
    put("ctrl", "hello", bytes([0]) + hello())
    put("ctrl", "hello-uid2", bytes([2]) + hello(model=b"m0", geom=(4, 2, 64, 16, 0, 0, 0, 1)))
    put("ctrl", "hello-int8", bytes([4]) + hello(model=b"qwen", rev=b"r1",
                                               geom=(4, 2, 256, 16, 4, 1, 1, 2)))
    put("ctrl", "hello-bad-abi", bytes([0]) + hello()[:4] + b"\x02\x00" + hello()[6:])
    for c in range(1, 9):
        put("ctrl", "admin-%d" % c, bytes([1, 32]) + admin(c, 0 if c != 4 else 0xffffffff, 3))
    put("ctrl", "admin-reload", bytes([5, 32]) + admin(7) +
        b"max_clients = 8\n[tenant a]\nuids = 0\nsecret = 0123456789abcdef\n")


if __name__ == "__main__":
    sqe_seeds()
    ctrl_seeds()
