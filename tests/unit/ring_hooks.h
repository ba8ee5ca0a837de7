/* SPDX-License-Identifier: MIT */
/*
 * Forced into kvd/ring.c and libkvclient/queue.c (cc -include) for the
 * ring stress test only: every access of a shared ring word and every
 * barrier calls kv_ring_hook() before and after, where the test may
 * spin, yield or sleep, so the other side runs inside each window of
 * the ordering contract (D1..D7, C1..C7). The sources stay as they are:
 * this header includes barrier.h first, so their own #include of it is
 * a no-op and the macros below are the ones they use.
 */
#ifndef KV_RING_HOOKS_H
#define KV_RING_HOOKS_H

#include <kv/barrier.h>

void kv_ring_hook(void);

#undef KV_READ_ONCE
#undef KV_WRITE_ONCE
#undef kv_smp_store_release
#undef kv_smp_load_acquire
#undef kv_smp_mb
#undef kv_atomic_or
#undef kv_atomic_andnot

/* The hook on both sides: the window after a publishing store matters
 * as much as the one before it. */
#define KV_RING_HOOKED(expr) ({						\
	kv_ring_hook();							\
	__auto_type __v = (expr);					\
	kv_ring_hook();							\
	__v;								\
})
#define KV_RING_HOOKED_VOID(expr) do {					\
	kv_ring_hook();							\
	expr;								\
	kv_ring_hook();							\
} while (0)

#define KV_READ_ONCE(x)		\
	KV_RING_HOOKED(__atomic_load_n(&(x), __ATOMIC_RELAXED))
#define KV_WRITE_ONCE(x, v)	\
	KV_RING_HOOKED_VOID(__atomic_store_n(&(x), (v), __ATOMIC_RELAXED))
#define kv_smp_store_release(p, v)	\
	KV_RING_HOOKED_VOID(__atomic_store_n((p), (v), __ATOMIC_RELEASE))
#define kv_smp_load_acquire(p)	\
	KV_RING_HOOKED(__atomic_load_n((p), __ATOMIC_ACQUIRE))
#define kv_smp_mb()		\
	KV_RING_HOOKED_VOID(__atomic_thread_fence(__ATOMIC_SEQ_CST))
#define kv_atomic_or(p, v)	\
	KV_RING_HOOKED(__atomic_fetch_or((p), (v), __ATOMIC_RELAXED))
#define kv_atomic_andnot(p, v)	\
	KV_RING_HOOKED(__atomic_fetch_and((p), ~(v), __ATOMIC_RELAXED))

#endif /* KV_RING_HOOKS_H */
