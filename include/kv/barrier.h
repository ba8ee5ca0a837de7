/* SPDX-License-Identifier: MIT */
/*
 * Memory-ordering primitives for the request ring, defined once.
 *
 * The ring lives in a memfd shared by two processes, so these must be
 * lock-free atomics on plain __u32 words (C11 __atomic builtins, which
 * gcc and clang both provide). Every use in kvd/ring.c and
 * libkvclient/queue.c names the access it pairs with.
 */
#ifndef KV_BARRIER_H
#define KV_BARRIER_H

/* Plain single-copy-atomic access: no ordering, no tearing. */
#define KV_READ_ONCE(x)		__atomic_load_n(&(x), __ATOMIC_RELAXED)
#define KV_WRITE_ONCE(x, v)	__atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* Publish: everything written before is visible to an acquire of p. */
#define kv_smp_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Consume: nothing after is reordered before this load. */
#define kv_smp_load_acquire(p)		__atomic_load_n((p), __ATOMIC_ACQUIRE)

/* Full barrier: orders an earlier store against a later load (Dekker). */
#define kv_smp_mb()			__atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Atomic flag updates on shared words (flags are set by one side only). */
#define kv_atomic_or(p, v)	__atomic_fetch_or((p), (v), __ATOMIC_RELAXED)
#define kv_atomic_andnot(p, v)	__atomic_fetch_and((p), ~(v), __ATOMIC_RELAXED)

/* Busy-wait hint: lets the sibling hyperthread (or the host) run. */
#if defined(__x86_64__) || defined(__i386__)
#define kv_cpu_relax()		__builtin_ia32_pause()
#elif defined(__aarch64__)
#define kv_cpu_relax()		__asm__ __volatile__("yield" ::: "memory")
#else
#define kv_cpu_relax()		__asm__ __volatile__("" ::: "memory")
#endif

#endif /* KV_BARRIER_H */
