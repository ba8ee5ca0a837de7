// SPDX-License-Identifier: MIT
/*
 * Reclaim across namespaces (kvd/reclaim.c, through kvd/ns.c): two
 * namespaces of two tenants and different block sizes on one pool; a
 * slab is given up whole, only when none of its blocks is held and its
 * pages make the run asked for, leaf first across slabs, and an ALLOC
 * that cannot succeed evicts nothing, in set cases and a random run with
 * the books checked at every step.
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

/* Two tenants' index keys, for the two namespaces. */
static const struct kvd_tenant_key rkey11 = { { 11 } };
static const struct kvd_tenant_key rkey22 = { { 22 } };

/* V: 512 KiB blocks, four to a one-page slab; W: 2 MiB blocks. */
static const struct kv_geometry g512k = {
	.layers = 16, .kv_heads = 8, .head_dim = 128, .block_tokens = 8,
	.dtype = KV_DTYPE_FP16,
};
static const struct kv_geometry g2m = {
	.layers = 32, .kv_heads = 8, .head_dim = 128, .block_tokens = 16,
	.dtype = KV_DTYPE_FP16,
};

struct two {
	struct kvd_pool	pool;
	struct kvd_ns	ns[2];		/* [0] V, [1] W: two tenants */
	struct kvd_holder hv, hw;
};

static struct two *two_new(uint32_t pages)
{
	struct two *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(kvd_pool_init(&t->pool, pages), 0);
	assert_int_equal(kvd_ns_init(&t->ns[0], &t->pool, 0, "v", "", &g512k,
				     1, &rkey11), 0);
	assert_int_equal(kvd_ns_init(&t->ns[1], &t->pool, 1, "w", "", &g2m,
				     2, &rkey22), 0);
	t->pool.ns = t->ns;
	t->pool.nr_ns = 2;
	kvd_holder_init(&t->hv, 0);
	kvd_holder_init(&t->hw, 1);
	return t;
}

static void two_check(struct two *t)
{
	const char *why = NULL;

	for (int i = 0; i < 2; i++)
		if (kvd_ns_check(&t->ns[i], &why))
			fail_msg("ns %d: books broken: %s", i, why);
}

static void two_free(struct two *t)
{
	kvd_ns_release_all(&t->ns[0], &t->hv);
	kvd_ns_release_all(&t->ns[1], &t->hw);
	two_check(t);
	kvd_ns_exit(&t->ns[0]);
	kvd_ns_exit(&t->ns[1]);
	kvd_pool_exit(&t->pool);
	free(t);
}

/* Commit @n ids of V as one chain of hashes base.., the first a root
 * unless @parent is given. */
static void v_chain(struct two *t, const uint32_t *ids, uint32_t n,
		    uint32_t base, const struct kv_hash *parent)
{
	struct kv_commit e[8];

	for (uint32_t i = 0; i < n; i++) {
		e[i] = (struct kv_commit){ .id = ids[i], .hash = H(base + i) };
		if (i)
			e[i].parent = H(base + i - 1);
		else if (parent)
			e[i].parent = *parent;
	}
	assert_int_equal(kvd_ns_commit(&t->ns[0], &t->hv, e, n), (int)n);
}

/*
 * V fills all @pages: in every slab a chain of four, its root held and
 * the three below it cached (ids[4k..4k+3] in slab k).
 */
static void v_fill(struct two *t, uint32_t pages, uint32_t *ids)
{
	assert_int_equal(kvd_ns_alloc(&t->ns[0], &t->hv, ids, 4 * pages),
			 (int)(4 * pages));
	for (uint32_t k = 0; k < pages; k++) {
		for (uint32_t i = 1; i < 4; i++)
			assert_int_equal(t->ns[0].blocks[ids[4 * k + i]].slab,
					 t->ns[0].blocks[ids[4 * k]].slab);
		v_chain(t, ids + 4 * k, 4, 100 * k, NULL);
		assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv,
						ids + 4 * k + 1, 3), 3);
	}
	assert_int_equal(t->pool.pages_used, pages);
	assert_int_equal(t->ns[0].cached_blocks, 3 * pages);
	two_check(t);
}

/*
 * Issue 14's report: a slab of V with one held block cannot become free,
 * however many of its cached blocks go. W's ALLOC used to empty V's
 * cache (24 blocks here) and fail all the same. Now it fails with
 * -ENOSPC evicting nothing; once one slab of V holds only cached blocks,
 * W gets that slab's page and only its four blocks go.
 */
static void test_prefix_reclaim_whole_slabs(void **state)
{
	struct two *t = two_new(8);
	uint32_t ids[32], w[2];

	(void)state;
	v_fill(t, 8, ids);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 1), -ENOSPC);
	assert_int_equal(t->ns[0].evictions, 0);
	assert_int_equal(t->pool.reclaims, 0);
	assert_int_equal(t->ns[0].cached_blocks, 24);
	two_check(t);
	/* slab 5's root goes: that slab alone is worth reclaiming */
	assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv, &ids[20], 1), 1);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 1), 1);
	assert_int_equal(w[0] * 4, ids[20]);	/* slab 5's page */
	assert_int_equal(t->ns[0].evictions, 4);
	assert_int_equal(t->pool.reclaims, 4);
	assert_int_equal(t->ns[0].cached_blocks, 21);
	assert_int_equal(t->ns[0].nr_slabs, 7);
	two_check(t);
	two_free(t);
}

/*
 * The admission check sees what reclaim can free: with one reclaimable
 * slab of V, W's ALLOC of two is refused before anything is evicted
 * (it used to count all of V's cached blocks as room, evict, then fail);
 * V's guaranteed min_pages is kept the same way.
 */
static void test_prefix_reclaim_refused_evicts_nothing(void **state)
{
	struct two *t = two_new(8);
	uint32_t ids[32], w[2];

	(void)state;
	v_fill(t, 8, ids);
	assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv, &ids[8], 1), 1);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 2), -ENOSPC);
	assert_int_equal(t->ns[0].evictions, 0);
	assert_int_equal(t->pool.reclaims, 0);
	assert_int_equal(t->ns[1].nr_slabs, 0);
	two_check(t);
	/* V may not go below 8 pages: nothing is reclaimable at all */
	t->ns[0].acct.min_pages = 8;
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 1), -ENOSPC);
	assert_int_equal(t->ns[0].evictions, 0);
	t->ns[0].acct.min_pages = 7;
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 1), 1);
	assert_int_equal(t->ns[0].evictions, 4);
	assert_int_equal(t->pool.reclaims, 4);
	two_check(t);
	two_free(t);
}

/*
 * Leaf first across slabs: V's chain runs from slab A (older) into
 * slab B. A is the colder, but reclaiming it would cut B's blocks off
 * their parent: B goes first, then A, each chain left reachable.
 */
/* V's chain of eight, cached: a0..a3 in slab A, then b0..b3 in slab B. */
static void v_two_slab_chain(struct two *t, uint32_t *ids)
{
	struct kv_hash a3 = H(3);

	assert_int_equal(kvd_ns_alloc(&t->ns[0], &t->hv, ids, 8), 8);
	v_chain(t, ids, 4, 0, NULL);
	v_chain(t, ids + 4, 4, 4, &a3);	/* b0's parent: a3, in A */
	assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv, ids, 4), 4);
	assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv, ids + 4, 4), 4);
	two_check(t);
}

static void test_prefix_reclaim_leaf_first_across_slabs(void **state)
{
	struct two *t = two_new(2);
	uint32_t ids[8], w[2], hits[8];
	struct kv_hash q[8];

	(void)state;
	v_two_slab_chain(t, ids);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 1), 1);
	assert_int_equal(w[0] * 4, ids[4]);	/* B's page */
	assert_int_equal(t->ns[0].evictions, 4);
	two_check(t);
	for (uint32_t i = 0; i < 8; i++)
		q[i] = H(i);
	assert_int_equal(kvd_ns_lookup(&t->ns[0], &t->hv, q, 8, hits), 4);
	assert_int_equal(kvd_ns_release(&t->ns[0], &t->hv, hits, 4), 4);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w + 1, 1), 1);
	assert_int_equal(t->ns[0].evictions, 8);
	assert_int_equal(t->pool.reclaims, 8);
	assert_int_equal(t->ns[0].nr_slabs, 0);
	two_check(t);
	two_free(t);
}

/*
 * One ALLOC that needs both of those slabs: the admission check sees
 * that A follows once B is gone, and reclaim takes B, then A.
 */
static void test_prefix_reclaim_chain_of_slabs(void **state)
{
	struct two *t = two_new(2);
	uint32_t ids[8], w[2];

	(void)state;
	v_two_slab_chain(t, ids);
	assert_int_equal(kvd_ns_alloc(&t->ns[1], &t->hw, w, 2), 2);
	assert_int_equal(t->ns[0].evictions, 8);
	assert_int_equal(t->pool.reclaims, 8);
	assert_int_equal(t->ns[0].nr_slabs, 0);
	assert_int_equal(t->ns[0].committed_blocks, 0);
	two_check(t);
	two_free(t);
}

/*
 * Random ALLOC, COMMIT and RELEASE on two namespaces of other block
 * sizes and slab alignments (V: one-page slabs; X: 5 MiB blocks in
 * 10 MiB slabs at multiples of 10 MiB) over one pool in extents of
 * 4 pages, each one tenant's at a time: books checked
 * after every step, and an ALLOC that fails has evicted nothing, in
 * either namespace.
 */
static void test_prefix_reclaim_random(void **state)
{
	static const struct kv_geometry g5m = {
		.layers = 80, .kv_heads = 8, .head_dim = 128,
		.block_tokens = 16, .dtype = KV_DTYPE_FP16,
	};
	struct two *t = calloc(1, sizeof(*t));
	uint32_t held[2][64], nh[2] = { 0, 0 }, hash = 1, last[2] = { 0, 0 };
	struct kvd_holder *hr[2];
	unsigned seed = 14;

	(void)state;
	assert_non_null(t);
	assert_int_equal(kvd_pool_init(&t->pool, 16), 0);
	/* extents of 4 pages, one tenant's each: X's 5-page slabs span two */
	assert_int_equal(kvd_pool_set_extents(&t->pool, 4), 0);
	assert_int_equal(kvd_ns_init(&t->ns[0], &t->pool, 0, "v", "", &g512k,
				     1, &rkey11), 0);
	assert_int_equal(kvd_ns_init(&t->ns[1], &t->pool, 1, "x", "", &g5m,
				     2, &rkey22), 0);
	t->pool.ns = t->ns;
	t->pool.nr_ns = 2;
	t->ns[0].acct.min_pages = 3;	/* V keeps 3 pages from X */
	kvd_holder_init(&t->hv, 0);
	kvd_holder_init(&t->hw, 1);
	hr[0] = &t->hv;
	hr[1] = &t->hw;
	for (int step = 0; step < 4000; step++) {
		uint32_t i = rand_r(&seed) % 2, n = 1 + rand_r(&seed) % 5;
		uint64_t e0 = t->ns[0].evictions, e1 = t->ns[1].evictions;
		uint64_t rec = t->pool.reclaims;
		struct kvd_ns *ns = &t->ns[i];
		struct kv_commit e[5];
		uint32_t ids[5];
		int ret;

		if (rand_r(&seed) % 3 == 0 || nh[i] + n > 64) {
			while (nh[i] && rand_r(&seed) % 4) {
				uint32_t k = rand_r(&seed) % nh[i];

				assert_int_equal(kvd_ns_release(ns, hr[i],
								&held[i][k], 1), 1);
				held[i][k] = held[i][--nh[i]];
			}
			two_check(t);
			continue;
		}
		ret = kvd_ns_alloc(ns, hr[i], ids, n);
		if (ret < 0) {
			assert_int_equal(ret, -ENOSPC);
			assert_int_equal(t->ns[0].evictions, e0);
			assert_int_equal(t->ns[1].evictions, e1);
			assert_int_equal(t->pool.reclaims, rec);
			two_check(t);
			continue;
		}
		/* a chain, hanging from this namespace's last one or a root */
		for (uint32_t k = 0; k < n; k++) {
			e[k] = (struct kv_commit){ .id = ids[k], .hash = H(hash) };
			if (k)
				e[k].parent = H(hash - 1);
			else if (last[i] && rand_r(&seed) % 2)
				e[k].parent = H(last[i]);
			hash++;
			held[i][nh[i]++] = ids[k];
		}
		last[i] = hash - 1;
		assert_int_equal(kvd_ns_commit(ns, hr[i], e, n), (int)n);
		two_check(t);
	}
	assert_true(t->pool.reclaims > 0);
	two_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefix_reclaim_whole_slabs),
		cmocka_unit_test(test_prefix_reclaim_refused_evicts_nothing),
		cmocka_unit_test(test_prefix_reclaim_leaf_first_across_slabs),
		cmocka_unit_test(test_prefix_reclaim_chain_of_slabs),
		cmocka_unit_test(test_prefix_reclaim_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
