// SPDX-License-Identifier: MIT
/*
 * The prefix cache (kvd/prefix.c, through kvd/ns.c) on a real namespace:
 * leaf-first LRU, eviction instead of -ENOSPC, commit dedup, and a
 * randomized run of lookups, allocations, commits, refs, releases and
 * client deaths with the books checked by kvd_ns_check() after every
 * step.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ns_internal.h"

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
	struct ctx *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(kvd_pool_init(&t->pool, pages), 0);
	assert_int_equal(kvd_ns_init(&t->ns, &t->pool, 0, "m", "", &g1m, 7, 42), 0);
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

static struct kv_hash H(uint32_t v)
{
	struct kv_hash h = { { 0 } };

	memcpy(h.b, &v, sizeof(v));
	h.b[15] = 0x5a;		/* never the all-zero root */
	return h;
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefix_leaf_match_evict),
		cmocka_unit_test(test_prefix_lru_leaf_first),
		cmocka_unit_test(test_prefix_alloc_all_or_nothing),
		cmocka_unit_test(test_prefix_commit_dedup_refs),
		cmocka_unit_test(test_prefix_random_books),
		cmocka_unit_test(test_prefix_ref_never_wraps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
