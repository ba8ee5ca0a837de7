// SPDX-License-Identifier: MIT
/*
 * The prefix cache (kvd/prefix.c, through kvd/ns.c) on a real namespace:
 * leaf-first LRU, eviction instead of -ENOSPC, commit dedup, and a
 * randomized run of lookups, allocations, commits, refs, releases and
 * client deaths with the books checked by kvd_ns_check() after every
 * step; exact LRU order, failed requests that change nothing, no key
 * bytes in the tree dump, and hits against vLLM's block pool. Reclaim
 * across namespaces is test_reclaim.c.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ns_internal.h"
#include "test_prefix_util.h"


#define NR_HOLDERS	3
#define MIB		(1ULL << 20)

struct ctx {
	struct kvd_pool	pool;
	struct kvd_ns	ns;
	struct kvd_holder h[NR_HOLDERS];
};

/* 1 MiB blocks, 2 per page: pools of a few blocks. */
static const struct kv_geometry g1m = {
	.layers = 32, .kv_heads = 4, .head_dim = 128, .block_tokens = 16,
	.dtype = KV_DTYPE_FP16,
};

static struct ctx *ctx_new(uint32_t pages)
{
	static const struct kvd_tenant_key key = { { 42 } };
	struct ctx *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(kvd_pool_init(&t->pool, pages), 0);
	assert_int_equal(kvd_ns_init(&t->ns, &t->pool, 0, "m", "", &g1m, 7,
				     &key), 0);
	for (int i = 0; i < NR_HOLDERS; i++)
		kvd_holder_init(&t->h[i], (uint32_t)i);
	return t;
}

static void ctx_free(struct ctx *t)
{
	kvd_ns_exit(&t->ns);
	kvd_pool_exit(&t->pool);
	free(t);
}

static void check(struct ctx *t)
{
	const char *why = NULL;
	int ret = kvd_ns_check(&t->ns, &why);

	if (ret)
		fail_msg("books broken: %s", why);
}


/* Commit @n held blocks as a chain of hashes base, base+1, ... */
static void commit_chain(struct ctx *t, int who, const uint32_t *ids,
			 uint32_t n, uint32_t base)
{
	struct kv_commit e[8];

	for (uint32_t i = 0; i < n; i++) {
		e[i] = (struct kv_commit){ .id = ids[i], .hash = H(base + i) };
		if (i)
			e[i].parent = H(base + i - 1);
	}
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[who], e, n), (int)n);
}

/*
 * The leaf on its own: publish a chain, match it, then evict leaf first;
 * each evicted block is the caller's to give back (here, to its slab).
 */
static void test_prefix_leaf_match_evict(void **state)
{
	struct ctx *t = ctx_new(4);	/* 8 blocks */
	struct kv_hash root = { { 0 } }, key, q[4];
	uint32_t ids[3], got[4], id;

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 3), 3);
	for (uint32_t i = 0; i < 3; i++) {
		struct kv_hash h = H(10 + i), parent = i ? H(10 + i - 1) : root;

		key = kvd_prefix_key(&t->ns, &h);
		assert_int_equal(kvd_prefix_find(&t->ns, &key), KVD_NIL);
		kvd_prefix_publish(&t->ns, ids[i], &key, &parent);
		assert_int_equal(kvd_prefix_find(&t->ns, &key), ids[i]);
	}
	assert_int_equal(t->ns.committed_blocks, 3);
	assert_int_equal(t->ns.blocks[ids[0]].nr_children, 1);
	assert_int_equal(t->ns.blocks[ids[1]].parent, ids[0]);
	/* the longest prefix, stopped by a miss; no ref taken */
	q[0] = H(10), q[1] = H(11), q[2] = H(12), q[3] = H(99);
	assert_int_equal(kvd_prefix_match(&t->ns, q, 4, got), 3);
	assert_memory_equal(got, ids, sizeof(ids));
	assert_int_equal(kvd_prefix_match(&t->ns, q + 3, 1, got), 0);
	assert_int_equal(t->ns.blocks[ids[0]].ref, 1);
	/* at ref 0 only the leaf is on the LRU: it goes first */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], ids, 3), 3);
	assert_int_equal(t->ns.lru_len, 1);
	check(t);
	for (uint32_t i = 3; i--;) {
		assert_int_equal(kvd_prefix_evict_one(&t->ns, &id), 0);
		assert_int_equal(id, ids[i]);
		assert_false(t->ns.blocks[id].committed);
		kvd_slab_free_block(&t->ns, id);
		check(t);
	}
	assert_int_equal(kvd_prefix_evict_one(&t->ns, &id), -ENOSPC);
	assert_int_equal(kvd_prefix_match(&t->ns, q, 3, got), 0);
	assert_int_equal(t->ns.evictions, 3);
	assert_int_equal(t->pool.pages_used, 0);
	ctx_free(t);
}

static void test_prefix_lru_leaf_first(void **state)
{
	struct ctx *t = ctx_new(2);	/* 4 blocks */
	uint32_t a[3], b, x, hits[3];
	struct kv_hash chain[3] = { H(100), H(101), H(102) };

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], a, 3), 3);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &b, 1), 1);
	commit_chain(t, 0, a, 3, 100);
	commit_chain(t, 0, &b, 1, 200);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], a, 3), 3);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &b, 1), 1);
	check(t);
	assert_int_equal(t->ns.cached_blocks, 4);
	assert_int_equal(t->ns.lru_len, 2);	/* leaves a2, b only */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &x, 1), 1);
	assert_int_equal(x, a[2]);		/* oldest leaf */
	check(t);
	/* a1 became a leaf and went to the LRU head: next out. */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &x, 1), 1);
	assert_int_equal(x, a[1]);
	assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[2], chain, 3, hits), 1);
	assert_int_equal(hits[0], a[0]);	/* a0 still reachable */
	check(t);
	/* b and a0 held by nobody but h2's hit: only b can go. */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &x, 1), 1);
	assert_int_equal(x, b);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &x, 1), -ENOSPC);
	assert_int_equal(t->ns.evictions, 3);
	check(t);
	kvd_ns_release_all(&t->ns, &t->h[2]);	/* a0 cached again */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &x, 1), 1);
	assert_int_equal(x, a[0]);
	kvd_ns_release_all(&t->ns, &t->h[1]);
	check(t);
	assert_int_equal(t->pool.pages_used, 0);
	ctx_free(t);
}

static void test_prefix_alloc_all_or_nothing(void **state)
{
	struct ctx *t = ctx_new(3);	/* 6 blocks */
	uint32_t ids[4], more[6], other[2];
	struct kv_hash hs[2] = { H(1), H(2) };

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 2), 2);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], other, 2), 2);
	commit_chain(t, 0, ids, 2, 1);
	/* h1 hits both and wants 5 in all: 3 new, 2 free; nothing kept. */
	assert_int_equal(kvd_ns_alloc_prefix(&t->ns, &t->h[1], hs, 2, more, 5),
			 -ENOSPC);
	assert_int_equal(t->h[1].nr_refs, 0);
	assert_int_equal(t->ns.blocks[ids[0]].ref, 1);
	check(t);
	assert_int_equal(kvd_ns_alloc_prefix(&t->ns, &t->h[1], hs, 2, more, 4),
			 2);
	assert_int_equal(more[0], ids[0]);
	assert_int_equal(more[1], ids[1]);
	assert_int_equal(kvd_ns_alloc_prefix(&t->ns, &t->h[1], hs, 3, more, 2),
			 -EINVAL);	/* more hashes than blocks */
	check(t);
	kvd_ns_release_all(&t->ns, &t->h[0]);
	kvd_ns_release_all(&t->ns, &t->h[1]);
	kvd_ns_release_all(&t->ns, &t->h[2]);
	assert_int_equal(kvd_ns_evict_all(&t->ns), 2);
	check(t);
	assert_int_equal(t->pool.pages_used, 0);
	ctx_free(t);
}

static void test_prefix_commit_dedup_refs(void **state)
{
	struct ctx *t = ctx_new(4);
	uint32_t a, b;
	struct kv_commit e;

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &a, 1), 1);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &b, 1), 1);
	commit_chain(t, 0, &a, 1, 9);
	e = (struct kv_commit){ .id = b, .hash = H(9) };
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[1], &e, 1), 1);
	assert_int_equal(e.id, a);
	assert_int_equal(e.flags, KV_COMMIT_DEDUP);
	assert_int_equal(t->ns.blocks[a].ref, 2);
	assert_int_equal(t->ns.blocks[b].state, KVD_BLOCK_FREE);	/* released */
	check(t);
	e = (struct kv_commit){ .id = a, .hash = H(10) };
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[2], &e, 1), -EPERM);
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[1], &e, 1), -EEXIST);
	e.flags = 1;
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[1], &e, 1), -EINVAL);
	kvd_ns_release_all(&t->ns, &t->h[0]);
	kvd_ns_release_all(&t->ns, &t->h[1]);
	assert_int_equal(t->ns.cached_blocks, 1);
	check(t);
	ctx_free(t);
}

/* A block at KVD_REF_MAX refs is never hit, ref'd or deduped into. */
static void test_prefix_ref_never_wraps(void **state)
{
	struct ctx *t = ctx_new(2);
	uint32_t a, b, hit;
	struct kv_hash h = H(77);
	struct kv_commit e;

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &a, 1), 1);
	commit_chain(t, 0, &a, 1, 77);
	/* pretend h0 took KVD_REF_MAX - 1 more refs (REF would take 30 s) */
	t->ns.blocks[a].ref = KVD_REF_MAX;
	assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], &h, 1, &hit), 0);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], &a, 1), -EOVERFLOW);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &b, 1), 1);
	e = (struct kv_commit){ .id = b, .hash = h };
	assert_int_equal(kvd_ns_commit(&t->ns, &t->h[1], &e, 1), 1);
	assert_int_equal(e.id, b);		/* kept its own block */
	assert_int_equal(e.flags, 0);
	assert_int_equal(t->ns.blocks[a].ref, KVD_REF_MAX);
	t->ns.blocks[a].ref = 1;
	kvd_ns_release_all(&t->ns, &t->h[0]);
	kvd_ns_release_all(&t->ns, &t->h[1]);
	check(t);
	ctx_free(t);
}

/*
 * Exact LRU under leaf first: a parent hit by lookups that add no child
 * (a hot system prompt, short queries after it) joins the LRU at its own
 * last use when its last child goes, not at the cold end ahead of older
 * leaves.
 */
static void test_prefix_lru_hot_parent_kept(void **state)
{
	struct ctx *t = ctx_new(4);	/* 8 blocks */
	uint32_t sa[2], b, hit, fill[5], x;
	struct kv_hash sys = H(300);

	(void)state;
	/* system prompt S with one conversation's block A under it */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], sa, 2), 2);
	commit_chain(t, 0, sa, 2, 300);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], sa, 2), 2);
	/* an unrelated prompt B, released after A */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &b, 1), 1);
	commit_chain(t, 0, &b, 1, 400);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &b, 1), 1);
	/* a short query hits S and adds nothing under it: S is now hot */
	assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], &sys, 1, &hit), 1);
	assert_int_equal(hit, sa[0]);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[1], &hit, 1), 1);
	check(t);
	/* the free blocks go first, then the leaves by last use */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], fill, 5), 5);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], &x, 1), 1);
	assert_int_equal(x, sa[1]);		/* A: the oldest leaf */
	check(t);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], &x, 1), 1);
	assert_int_equal(x, b);			/* B, older than S's hit */
	assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], &sys, 1, &hit), 1);
	assert_int_equal(hit, sa[0]);		/* S survived */
	kvd_ns_release_all(&t->ns, &t->h[1]);
	check(t);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], &x, 1), 1);
	assert_int_equal(x, sa[0]);		/* and goes last */
	kvd_ns_release_all(&t->ns, &t->h[2]);
	check(t);
	assert_int_equal(t->pool.pages_used, 0);
	ctx_free(t);
}

/* ---- a failed request changes nothing ---- */

#define SNAP_BLOCKS	16

/* What a request may change: counters, and each block's books. */
struct snap {
	uint64_t lookups, hit_blocks, evictions, frees, clock;
	uint32_t cached, committed, used, lru_len, pages, holds;
	uint32_t refs[NR_HOLDERS], nblocks[NR_HOLDERS];
	struct {
		uint64_t tick;
		uint32_t ref, parent, children, owner;
		uint8_t state;
		bool committed, on_lru;
	} b[SNAP_BLOCKS];
};

static void snap_take(struct ctx *t, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	s->lookups = t->ns.lookups;
	s->hit_blocks = t->ns.hit_blocks;
	s->evictions = t->ns.evictions;
	s->frees = t->pool.frees;
	s->clock = t->pool.clock;
	s->cached = t->ns.cached_blocks;
	s->committed = t->ns.committed_blocks;
	s->used = t->ns.blocks_used;
	s->lru_len = t->ns.lru_len;
	s->pages = t->pool.pages_used;
	s->holds = t->ns.holds.nr;
	for (int i = 0; i < NR_HOLDERS; i++) {
		s->refs[i] = t->h[i].nr_refs;
		s->nblocks[i] = t->h[i].nr_blocks;
	}
	assert_true(t->ns.max_blocks <= SNAP_BLOCKS);
	for (uint32_t id = 0; id < t->ns.max_blocks; id++) {
		const struct kvd_block *b = &t->ns.blocks[id];

		if (b->state == KVD_BLOCK_NONE || b->state == KVD_BLOCK_FREE) {
			s->b[id].state = b->state == KVD_BLOCK_FREE;
			continue;
		}
		s->b[id].tick = b->tick;
		s->b[id].ref = b->ref;
		s->b[id].parent = b->committed ? b->parent : 0;
		s->b[id].children = b->nr_children;
		s->b[id].owner = b->owner;
		s->b[id].state = b->state;
		s->b[id].committed = b->committed;
		s->b[id].on_lru = b->on_lru;
	}
}

/* The order in which everything cached would be evicted (drains @t). */
static uint32_t evict_order(struct ctx *t, uint32_t *order)
{
	uint32_t n = 0;

	for (int i = 0; i < NR_HOLDERS; i++)
		kvd_ns_release_all(&t->ns, &t->h[i]);
	while (!kvd_prefix_evict_one(&t->ns, &order[n])) {
		kvd_slab_free_block(&t->ns, order[n]);
		n++;
	}
	check(t);
	return n;
}

/*
 * @ref and @run went through the same steps, then a request failed on
 * @run: the books, the counters and the LRU order must be as in @ref.
 */
static void expect_unchanged(struct ctx *ref, struct ctx *run)
{
	struct snap a, b;
	uint32_t oa[SNAP_BLOCKS], ob[SNAP_BLOCKS], na, nb;

	check(run);
	snap_take(ref, &a);
	snap_take(run, &b);
	assert_int_equal(b.lookups, a.lookups);
	assert_int_equal(b.hit_blocks, a.hit_blocks);
	assert_int_equal(b.evictions, a.evictions);
	assert_int_equal(b.frees, a.frees);	/* no waiter woken */
	assert_int_equal(b.cached, a.cached);
	assert_int_equal(b.committed, a.committed);
	for (uint32_t id = 0; id < SNAP_BLOCKS; id++) {
		assert_int_equal(b.b[id].tick, a.b[id].tick);
		assert_int_equal(b.b[id].state, a.b[id].state);
		assert_int_equal(b.b[id].committed, a.b[id].committed);
	}
	assert_memory_equal(&b, &a, sizeof(a));
	na = evict_order(ref, oa);
	nb = evict_order(run, ob);
	assert_int_equal(nb, na);
	assert_memory_equal(ob, oa, na * sizeof(*oa));
}

/*
 * 6 blocks: a cached chain S0 -> S1 (S1 a leaf), a cached leaf B, a
 * cached parent P pinned by its child C that h0 holds, one free block.
 */
static void setup_busy(struct ctx *t)
{
	uint32_t s[2], b, pc[2], free1;

	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], s, 2), 2);
	commit_chain(t, 0, s, 2, 1);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &b, 1), 1);
	commit_chain(t, 0, &b, 1, 50);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], pc, 2), 2);
	commit_chain(t, 0, pc, 2, 60);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &free1, 1), 1);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], s, 2), 2);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &b, 1), 1);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], pc, 1), 1);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &free1, 1), 1);
	/* S0 was hit since: younger than B */
	assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[2], (struct kv_hash[]){
					       H(1) }, 1, &b), 1);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[2], &b, 1), 1);
	check(t);
	assert_int_equal(t->ns.cached_blocks, 4);
	assert_int_equal(t->ns.blocks_used, 1);
}

/*
 * A failed ALLOC_PREFIX: its hits go back to where they were in the LRU,
 * nothing is counted (lookups, hits), no waiter is woken; so a waiting
 * one, tried again on every free, changes nothing either.
 */
static void test_prefix_failed_alloc_prefix_changes_nothing(void **state)
{
	struct ctx *ref = ctx_new(3), *run = ctx_new(3);	/* 6 blocks */
	struct kv_hash hs[2] = { H(1), H(2) };
	uint32_t ids[6];

	(void)state;
	setup_busy(ref);
	setup_busy(run);
	/* 2 hits and 4 new: has_room() refuses at once */
	assert_int_equal(kvd_ns_alloc_prefix(&run->ns, &run->h[1], hs, 2,
					     ids, 6), -ENOSPC);
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);
	/* 2 hits and 3 new: the free one, B evicted, then P is pinned */
	ref = ctx_new(3), run = ctx_new(3);
	setup_busy(ref);
	setup_busy(run);
	for (int i = 0; i < 3; i++)	/* as a waiting request retries */
		assert_int_equal(kvd_ns_alloc_prefix(&run->ns, &run->h[1], hs,
						     2, ids, 5), -ENOSPC);
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);
}

/*
 * ALLOC and COW that fail after evicting: the evicted blocks are back,
 * in the index, under their parents, at their places in the LRU.
 */
static void test_prefix_failed_alloc_puts_back(void **state)
{
	struct ctx *ref = ctx_new(3), *run = ctx_new(3);
	uint32_t ids[5], mine[3], dst[3];

	(void)state;
	setup_busy(ref);
	setup_busy(run);
	/* the free one, B, S1, S0 evicted; P is pinned */
	assert_int_equal(kvd_ns_alloc(&run->ns, &run->h[1], ids, 5), -ENOSPC);
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);

	ref = ctx_new(3), run = ctx_new(3);
	setup_busy(ref);
	setup_busy(run);
	for (struct ctx *t = ref; t; t = t == ref ? run : NULL) {
		/* h1 hits S0, S1 (both committed: CoW copies both) and P */
		assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], (struct
				 kv_hash[]){ H(1), H(2) }, 2, mine), 2);
		assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], (struct
				 kv_hash[]){ H(60) }, 1, &mine[2]), 1);
	}
	/* three copies: the free one, B, then nothing evictable */
	assert_int_equal(kvd_ns_cow_begin(&run->ns, &run->h[1], mine, dst, 3),
			 -ENOSPC);
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);

	/* two copies made (the free one, B evicted), the copy fails */
	ref = ctx_new(3), run = ctx_new(3);
	for (struct ctx *t = ref; t; t = t == ref ? run : NULL) {
		setup_busy(t);
		assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], (struct
				 kv_hash[]){ H(1), H(2) }, 2, mine), 2);
	}
	assert_int_equal(kvd_ns_cow_begin(&run->ns, &run->h[1], mine, dst, 2),
			 2);
	assert_int_equal(run->ns.evictions, 1);
	kvd_ns_cow_end(&run->ns, &run->h[1], mine, dst, 2, false);
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);
}

/*
 * A failed request of every other kind, a bad entry after good ones:
 * RELEASE, REF, COMMIT and LOOKUP leave everything as it was.
 */
static void test_prefix_failed_requests_change_nothing(void **state)
{
	struct ctx *ref = ctx_new(3), *run = ctx_new(3);
	uint32_t held[2], bad[3], fresh;
	struct kv_commit e[2];

	(void)state;
	for (struct ctx *t = ref; t; t = t == ref ? run : NULL) {
		setup_busy(t);
		assert_int_equal(kvd_ns_lookup(&t->ns, &t->h[1], (struct
				 kv_hash[]){ H(1), H(2) }, 2, held), 2);
		assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], &fresh, 1), 1);
	}
	bad[0] = held[0], bad[1] = held[1], bad[2] = 5000;
	assert_int_equal(kvd_ns_release(&run->ns, &run->h[1], bad, 3), -EINVAL);
	bad[2] = held[0];	/* held once only */
	assert_int_equal(kvd_ns_release(&run->ns, &run->h[1], bad, 3), -EPERM);
	bad[2] = 5000;
	assert_int_equal(kvd_ns_ref(&run->ns, &run->h[1], bad, 3), -EINVAL);
	/* commit: a good entry, then one already committed */
	e[0] = (struct kv_commit){ .id = fresh, .hash = H(70) };
	e[1] = (struct kv_commit){ .id = held[0], .hash = H(71) };
	assert_int_equal(kvd_ns_commit(&run->ns, &run->h[1], e, 2), -EEXIST);
	/* a lookup the hold table has no room for */
	run->ns.holds.nr = run->ns.holds.cap;
	assert_int_equal(kvd_ns_lookup(&run->ns, &run->h[1], (struct kv_hash[]){
				       H(1), H(2) }, 2, bad), -ENOMEM);
	run->ns.holds.nr = ref->ns.holds.nr;
	expect_unchanged(ref, run);
	ctx_free(ref);
	ctx_free(run);
}

static uint64_t rng = 88172645463325252ULL;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/*
 * Random sequences over 3 holders: each holder's "requests" are chains
 * of hashes drawn from a few shared prompts, so hits, dedups, evictions
 * and leaf-first cascades all happen. The books are checked every step.
 */
static void test_prefix_random_books(void **state)
{
	struct ctx *t = ctx_new(3);	/* 6 blocks: heavy eviction */
	uint32_t held[NR_HOLDERS][64], nheld[NR_HOLDERS] = { 0 };
	uint64_t ops = 0, hits = 0;

	(void)state;
	for (int step = 0; step < 20000; step++) {
		int who = (int)rnd(NR_HOLDERS);
		uint32_t prompt = rnd(4) * 1000, len = 1 + rnd(4), ids[8];
		struct kv_hash hs[8];
		int ret;

		for (uint32_t i = 0; i < len; i++)
			hs[i] = H(prompt + i);
		switch (rnd(6)) {
		case 0:
		case 1:	/* a request: hit what is cached, allocate the rest */
			if (nheld[who] + len > 64)
				break;
			ret = kvd_ns_alloc_prefix(&t->ns, &t->h[who], hs, len,
						  ids, len);
			if (ret < 0) {
				assert_int_equal(ret, -ENOSPC);
				break;
			}
			hits += (uint64_t)ret;
			/* commit what was computed (dedup may swap ids) */
			for (uint32_t i = (uint32_t)ret; i < len; i++) {
				struct kv_commit e = { .id = ids[i], .hash = hs[i] };

				if (i)
					e.parent = hs[i - 1];
				ret = kvd_ns_commit(&t->ns, &t->h[who], &e, 1);
				assert_true(ret == 1 || ret == -EEXIST);
				ids[i] = e.id;
			}
			memcpy(&held[who][nheld[who]], ids, len * 4);
			nheld[who] += len;
			break;
		case 2:	/* release a random held block */
			if (!nheld[who])
				break;
			ret = (int)rnd(nheld[who]);
			assert_int_equal(kvd_ns_release(&t->ns, &t->h[who],
							&held[who][ret], 1), 1);
			held[who][ret] = held[who][--nheld[who]];
			break;
		case 3:	/* fork: one more ref */
			if (!nheld[who] || nheld[who] == 64)
				break;
			ret = (int)rnd(nheld[who]);
			assert_int_equal(kvd_ns_ref(&t->ns, &t->h[who],
						    &held[who][ret], 1), 1);
			held[who][nheld[who]] = held[who][ret];
			nheld[who]++;
			break;
		case 4:	/* a plain allocation */
			if (nheld[who] == 64)
				break;
			if (kvd_ns_alloc(&t->ns, &t->h[who], ids, 1) == 1)
				held[who][nheld[who]++] = ids[0];
			break;
		case 5:	/* the client dies */
			if (rnd(8))
				break;
			kvd_ns_release_all(&t->ns, &t->h[who]);
			nheld[who] = 0;
			break;
		}
		ops++;
		check(t);
	}
	for (int i = 0; i < NR_HOLDERS; i++)
		kvd_ns_release_all(&t->ns, &t->h[i]);
	check(t);
	kvd_ns_evict_all(&t->ns);
	check(t);
	assert_int_equal(t->pool.pages_used, 0);
	print_message("%llu ops, %llu hit blocks, %llu evictions\n",
		      (unsigned long long)ops, (unsigned long long)hits,
		      (unsigned long long)t->ns.evictions);
	assert_true(hits > 0 && t->ns.evictions > 0);
	ctx_free(t);
}

/*
 * ---- against vLLM's block pool ----
 *
 * A model of the semantics of vLLM's BlockPool (vllm/v1/core/block_pool.py,
 * FreeKVCacheBlockQueue in kv_cache_utils.py): one queue of ref-0 blocks
 * in eviction order, a hit takes its block out of it, a new block is the
 * queue's head (its hash dropped), and a request's blocks are appended at
 * its end, last block first, as their refs reach 0. On a stream of whole
 * blocks, one request after another with a few live at once, kvd (free
 * blocks first, then exact LRU leaf first) must hit exactly what vLLM
 * hits, request by request: a hot system prompt included. The model is
 * pinned to the real code: vLLM v0.19.0's BlockPool (65 blocks, its null
 * block first), driven through this stream with get_cached_block, touch,
 * get_new_blocks, cache_full_blocks and free_blocks(reversed(blocks)),
 * hit 6581 blocks, the sum over requests of (request + 1) x hits
 * 9847169.
 */
#define VB_BLOCKS	64	/* the pool: 32 pages of 2 blocks */
#define VB_LIVE		4
#define VB_MAXLEN	8

struct vblock {
	uint32_t hash, ref, prev, next;		/* hash 0: none */
	bool queued;
};

struct vpool {
	struct vblock b[VB_BLOCKS];
	uint32_t head, tail;
};

static void vq_del(struct vpool *v, uint32_t i)
{
	struct vblock *b = &v->b[i];

	if (b->prev != KVD_NIL)
		v->b[b->prev].next = b->next;
	else
		v->head = b->next;
	if (b->next != KVD_NIL)
		v->b[b->next].prev = b->prev;
	else
		v->tail = b->prev;
	b->queued = false;
}

static void vq_append(struct vpool *v, uint32_t i)
{
	v->b[i].prev = v->tail;
	v->b[i].next = KVD_NIL;
	if (v->tail != KVD_NIL)
		v->b[v->tail].next = i;
	else
		v->head = i;
	v->tail = i;
	v->b[i].queued = true;
}

static uint32_t v_find(const struct vpool *v, uint32_t hash)
{
	for (uint32_t i = 0; i < VB_BLOCKS; i++)
		if (v->b[i].hash == hash)
			return i;
	return KVD_NIL;
}

/* get_cached_block + touch, then get_new_blocks + cache_full_blocks */
static uint32_t v_request(struct vpool *v, const uint32_t *hs, uint32_t n,
			  uint32_t *ids)
{
	uint32_t h = 0;

	while (h < n && (ids[h] = v_find(v, hs[h])) != KVD_NIL)
		h++;
	for (uint32_t i = 0; i < h; i++)
		if (v->b[ids[i]].ref++ == 0)
			vq_del(v, ids[i]);
	for (uint32_t i = h; i < n; i++) {
		ids[i] = v->head;
		assert_int_not_equal(ids[i], KVD_NIL);
		vq_del(v, ids[i]);
		v->b[ids[i]].ref = 1;
		v->b[ids[i]].hash = hs[i];	/* the old one evicted */
	}
	return h;
}

/*
 * The tree dump (kvctl prefix --tree) carries no key bytes: an index key
 * is the client's hash mixed with the tenant secret, and pairs of both
 * would help to recover the secret. The field stays, zeroed.
 */
static void test_prefix_tree_no_key_bytes(void **state)
{
	static const struct kv_hash zero;
	struct ctx *t = ctx_new(4);
	struct kv_admin_tree_node node[4];
	uint32_t ids[3];

	(void)state;
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 3), 3);
	commit_chain(t, 0, ids, 3, 10);
	assert_int_equal(kvd_prefix_tree(&t->ns, node, 4, 8), 3);
	for (int i = 0; i < 3; i++) {
		struct kv_hash h = H(10 + (uint32_t)node[i].depth);
		struct kv_hash key = kvd_prefix_key(&t->ns, &h);

		assert_memory_not_equal(&node[i].hash, &key, sizeof(key));
		assert_memory_equal(&node[i].hash, &zero, sizeof(zero));
	}
	ctx_free(t);
}

/* free_blocks(reversed(blocks)) */
static void v_free(struct vpool *v, const uint32_t *ids, uint32_t n)
{
	for (uint32_t i = n; i--;)
		if (--v->b[ids[i]].ref == 0)
			vq_append(v, ids[i]);
}

struct vreq {
	uint32_t hs[VB_MAXLEN], n, kvd[VB_MAXLEN], vl[VB_MAXLEN];
};

static void k_free(struct ctx *t, struct vreq *r)
{
	uint32_t rev[VB_MAXLEN];

	for (uint32_t i = 0; i < r->n; i++)
		rev[i] = r->kvd[r->n - 1 - i];
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], rev, r->n),
			 (int)r->n);
}

static void test_prefix_hits_as_vllm(void **state)
{
	struct ctx *t = ctx_new(VB_BLOCKS / 2);
	struct vpool *v = calloc(1, sizeof(*v));
	struct vreq live[VB_LIVE] = { 0 }, *r;
	uint32_t next_hash = 1000, hits_k = 0, hits_v = 0, sum = 0;

	(void)state;
	assert_non_null(v);
	rng = 88172645463325252ULL;	/* the stream, whatever ran before */
	assert_int_equal(t->ns.max_blocks, VB_BLOCKS);
	v->head = v->tail = KVD_NIL;
	for (uint32_t i = 0; i < VB_BLOCKS; i++)
		vq_append(v, i);
	for (uint32_t q = 0; q < 3000; q++) {
		uint32_t sys = rnd(8) < 5 ? 0 : 1 + rnd(6), hk, hv;
		uint32_t nsys = 2 + sys % 3, tail = rnd(4);

		r = &live[q % VB_LIVE];
		if (r->n) {			/* the oldest live one ends */
			k_free(t, r);
			v_free(v, r->vl, r->n);
		}
		/* a system prompt, then 0..3 blocks of its own (0: a short
		 * query that hits the prompt and adds nothing under it) */
		r->n = nsys + tail;
		for (uint32_t i = 0; i < nsys; i++)
			r->hs[i] = 1 + sys * 16 + i;
		for (uint32_t i = nsys; i < r->n; i++)
			r->hs[i] = next_hash++;
		{
			struct kv_hash hs[VB_MAXLEN];
			struct kv_commit e[VB_MAXLEN];
			uint32_t ne = 0;

			for (uint32_t i = 0; i < r->n; i++)
				hs[i] = H(r->hs[i]);
			hk = (uint32_t)kvd_ns_alloc_prefix(&t->ns, &t->h[0], hs,
							   r->n, r->kvd, r->n);
			for (uint32_t i = hk; i < r->n; i++) {
				e[ne] = (struct kv_commit){ .id = r->kvd[i],
							    .hash = hs[i] };
				if (i)
					e[ne].parent = hs[i - 1];
				ne++;
			}
			if (ne)
				assert_int_equal(kvd_ns_commit(&t->ns, &t->h[0],
							       e, ne), (int)ne);
		}
		hv = v_request(v, r->hs, r->n, r->vl);
		if (hk != hv)
			fail_msg("request %u: kvd hit %u blocks, vLLM %u", q,
				 hk, hv);
		hits_k += hk;
		hits_v += hv;
		sum += (q + 1) * hk;
		check(t);
	}
	check(t);
	print_message("hit blocks: kvd %u, vLLM %u (sum of request x hits "
		      "%u); %u in the LRU heap\n", hits_k, hits_v, sum,
		      t->ns.lru_heap_len);
	assert_int_equal(hits_v, 6581);		/* vLLM's own code */
	assert_int_equal(sum, 9847169);
	assert_true(t->ns.evictions > 0);
	free(v);
	ctx_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefix_leaf_match_evict),
		cmocka_unit_test(test_prefix_lru_leaf_first),
		cmocka_unit_test(test_prefix_alloc_all_or_nothing),
		cmocka_unit_test(test_prefix_commit_dedup_refs),
		cmocka_unit_test(test_prefix_random_books),
		cmocka_unit_test(test_prefix_ref_never_wraps),
		cmocka_unit_test(test_prefix_lru_hot_parent_kept),
		cmocka_unit_test(test_prefix_failed_alloc_prefix_changes_nothing),
		cmocka_unit_test(test_prefix_failed_alloc_puts_back),
		cmocka_unit_test(test_prefix_failed_requests_change_nothing),
		cmocka_unit_test(test_prefix_hits_as_vllm),
		cmocka_unit_test(test_prefix_tree_no_key_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
