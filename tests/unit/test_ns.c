// SPDX-License-Identifier: MIT
/*
 * Namespaces, slabs, blocks and holds (kvd/ns.c over kvd/slab.c and
 * kvd/hold.c), through ns.h and the subsystem's ns_internal.h: no opcode
 * shares a block between two holders without the prefix cache, and
 * release_all needs shared blocks; share() (test_ns_util.h) does what a
 * hit does with the hold table's own functions. The random stress against
 * a shadow model is test_ns_stress.c.
 */
#include "test_ns_util.h"

/* ---- geometry ---- */

static void expect_bad(const struct kv_geometry *g, uint64_t pool_bytes,
		       int err)
{
	const char *why = NULL;

	assert_int_equal(kvd_geometry_check(g, pool_bytes, &why), err);
	assert_non_null(why);
	assert_true(strlen(why) > 0);
}

static void test_ns_geometry_check_errors(void **state)
{
	const uint64_t pool = 1ULL << 40;
	struct kv_geometry g;

	(void)state;
	for (int f = 0; f < 4; f++) {
		uint32_t *cnt[] = { &g.layers, &g.kv_heads, &g.head_dim,
				    &g.block_tokens };

		g = g_2m;
		*cnt[f] = 0;
		expect_bad(&g, pool, -EINVAL);
		*cnt[f] = 1025;
		expect_bad(&g, pool, -EINVAL);
		*cnt[f] = UINT32_MAX;
		expect_bad(&g, pool, -EINVAL);
	}
	g = g_2m;
	g.dtype = KV_DTYPE__MAX;
	expect_bad(&g, pool, -EINVAL);
	g = g_2m;
	g.quant = KV_QUANT_TOKEN;		/* scales need fp8 or int8 */
	expect_bad(&g, pool, -EINVAL);
	g.dtype = KV_DTYPE_FP8_E4M3;
	g.quant = KV_QUANT__MAX;
	expect_bad(&g, pool, -EINVAL);
	g = g_2m;
	g.tp_rank = 1;				/* rank 1 of an unsharded model */
	expect_bad(&g, pool, -EINVAL);
	g = g_2m;
	g.tp_size = 4;
	g.tp_rank = 4;
	expect_bad(&g, pool, -EINVAL);
	g.tp_size = 2000;
	g.tp_rank = 0;
	expect_bad(&g, pool, -EINVAL);
	/* 1 * 2 * 1 * 1 * 1 * 2 = 4 bytes: not a multiple of 256. */
	g = (struct kv_geometry)GEOM(1, 1, 1, 1, KV_DTYPE_FP16);
	expect_bad(&g, pool, -EINVAL);
	/* 2 * 1 * 3 * 1 * 64 * 1 = 384 bytes. */
	g = (struct kv_geometry)GEOM(3, 1, 64, 1, KV_DTYPE_INT8);
	expect_bad(&g, pool, -EINVAL);
	/* 1024 * 2 * 16 * 256 * 128 * 2 = 2 GiB > 1 GiB. */
	g = (struct kv_geometry)GEOM(1024, 16, 128, 256, KV_DTYPE_FP16);
	expect_bad(&g, pool, -EINVAL);
	/* Larger than half the pool. */
	expect_bad(&g_2m, 4 * MIB - 1, -E2BIG);
	expect_bad(&g_5m, 8 * MIB, -E2BIG);
}

/* Opaque geometries: runs of bytes; limits of their own. */
static void test_ns_geometry_check_opaque(void **state)
{
	const uint64_t pool = 1ULL << 40;
	const char *why = NULL;
	struct kv_geometry g;

	(void)state;
	/* 2 runs of 64 KiB (above head_dim's 1024): 128 KiB blocks */
	g = (struct kv_geometry)GEOM(2, 1, 65536, 16, KV_DTYPE_OPAQUE);
	assert_int_equal(kvd_geometry_check(&g, pool, &why), 0);
	g.kv_heads = 2;
	expect_bad(&g, pool, -EINVAL);
	g.kv_heads = 1;
	g.quant = KV_QUANT_TOKEN;
	expect_bad(&g, pool, -EINVAL);
	g.quant = KV_QUANT_NONE;
	g.run_bytes = 100;			/* 200 bytes: not 256-aligned */
	expect_bad(&g, pool, -EINVAL);
	g.run_bytes = KV_OPAQUE_RUN_MAX + 1;
	expect_bad(&g, pool, -EINVAL);
	g.run_bytes = 1 << 20;			/* 1 GiB + 1 MiB blocks */
	g.layers = 1025;
	expect_bad(&g, pool, -EINVAL);
	g.layers = 1024;
	g.block_tokens = 0;
	expect_bad(&g, pool, -EINVAL);
}

static void test_ns_geometry_check_ok(void **state)
{
	const char *why = NULL;
	struct kv_geometry g;

	(void)state;
	assert_int_equal(kvd_geometry_check(&g_2m, 4 * MIB, &why), 0);
	assert_int_equal(kvd_geometry_check(&g_5m, 10 * MIB, &why), 0);
	assert_int_equal(kvd_geometry_check(&g_512k, 2 * MIB, &why), 0);
	assert_int_equal(kvd_geometry_check(&g_odd, 1 << 30, &why), 0);
	/* Exactly 1 GiB, and every count at its limit of 1024. */
	g = (struct kv_geometry)GEOM(1024, 8, 128, 256, KV_DTYPE_FP16);
	assert_int_equal(kvd_geometry_check(&g, 2ULL << 30, &why), 0);
	g = (struct kv_geometry)GEOM(1024, 1024, 1, 1, KV_DTYPE_INT8);
	assert_int_equal(kvd_geometry_check(&g, 1ULL << 30, &why), 0);
	g = (struct kv_geometry)GEOM(1, 1, 1024, 1024, KV_DTYPE_FP32);
	assert_int_equal(kvd_geometry_check(&g, 1ULL << 30, &why), 0);
	/* quantized: scales after each layer, padded (any counts) */
	g = (struct kv_geometry)GEOM(3, 1, 64, 1, KV_DTYPE_INT8);
	g.quant = KV_QUANT_TOKEN;
	assert_int_equal(kvd_geometry_check(&g, 1ULL << 30, &why), 0);
	g.dtype = KV_DTYPE_FP8_E4M3;
	g.quant = KV_QUANT_CHANNEL;
	assert_int_equal(kvd_geometry_check(&g, 1ULL << 30, &why), 0);
	assert_null(why);
}

static void test_ns_init_geometry_2m(void **state)
{
	struct ctx *t = *state;

	ns_up(t, 16, &g_2m);
	assert_true(t->ns.live);
	assert_int_equal(t->ns.block_bytes, 2 * MIB);
	assert_int_equal(t->ns.slab_pages, 1);
	assert_int_equal(t->ns.slab_align, 1);
	assert_int_equal(t->ns.slab_bytes, 2 * MIB);
	assert_int_equal(t->ns.max_blocks, 16);
	assert_int_equal(t->ns.nr_slabs, 0);
	assert_int_equal(t->pool.pages_used, 0);
}

/* 5 MiB blocks: slabs of 5 pages (two blocks) at multiples of 10 MiB. */
static void test_ns_init_geometry_5m(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[8];

	ns_up(t, 22, &g_5m);
	assert_int_equal(t->ns.block_bytes, 5 * MIB);
	assert_int_equal(t->ns.slab_pages, 5);
	assert_int_equal(t->ns.slab_align, 5);
	assert_int_equal(t->ns.max_blocks, 8);	/* 44 MiB / 5 MiB */
	/* Pages 20 and 21 are no aligned slab: 4 slabs, 8 blocks. */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 8), 8);
	assert_int_equal(t->pool.pages_used, 20);
	assert_int_equal(t->ns.nr_slabs, 4);
	assert_int_equal(t->ns.nr_blocks, 8);
	for (uint32_t s = 0; s < t->ns.max_slabs; s++) {
		const struct kvd_slab *sl = &t->ns.slabs[s];
		uint64_t start = (uint64_t)sl->first_page * KV_PAGE_BYTES;

		if (!sl->live)
			continue;
		assert_int_equal(start % (10 * MIB), 0);
		assert_int_equal(sl->first_block, start / (5 * MIB));
		/* Zero waste: the slab is its blocks. */
		assert_int_equal(sl->nr_blocks * 5 * MIB, t->ns.slab_bytes);
	}
	for (uint32_t i = 0; i < 8; i++) {
		assert_block_in_slab(&t->ns, ids[i]);
		assert_block_pages_used(&t->ns, ids[i]);
	}
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 1), -ENOSPC);
}

static void test_ns_init_too_big(void **state)
{
	struct ctx *t = *state;

	/* A 10 MiB slab cannot come out of a 4-page pool. */
	assert_int_equal(kvd_pool_init(&t->pool, 4), 0);
	assert_int_equal(kvd_ns_init(&t->ns, &t->pool, 0, "m", "", &g_5m, 0,
				     &t_key), -E2BIG);
	assert_false(t->ns.live);
}

/* kvd/slab.c alone: carve in order, free list first, back to the pool. */
static void test_slab_carve_free(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], again;
	int s;

	assert_int_equal(kvd_slab_pages_for(2 * MIB), 1);
	assert_int_equal(kvd_slab_pages_for(5 * MIB), 5);
	assert_int_equal(kvd_slab_pages_for(512 * 1024), 1);
	assert_int_equal(kvd_slab_pages_for(332800), 16);	/* plain pages */
	ns_up(t, 2, &g_512k);		/* 4 blocks a page, one-page slabs */
	assert_int_equal(t->ns.partial, KVD_NIL);
	s = kvd_slab_new(&t->ns);
	assert_true(s >= 0);
	assert_int_equal(t->ns.partial, s);
	assert_int_equal(t->pool.pages_used, 1);
	assert_int_equal(t->ns.nr_blocks, 4);
	for (uint32_t i = 0; i < 4; i++) {
		ids[i] = kvd_slab_carve(&t->ns);
		assert_int_equal(ids[i], t->ns.slabs[s].first_block + i);
		assert_int_equal(t->ns.blocks[ids[i]].slab, s);
	}
	assert_int_equal(t->ns.partial, KVD_NIL);	/* full */
	kvd_slab_free_block(&t->ns, ids[1]);
	assert_int_equal(t->ns.partial, s);
	assert_int_equal(t->ns.blocks[ids[1]].state, KVD_BLOCK_FREE);
	again = kvd_slab_carve(&t->ns);
	assert_int_equal(again, ids[1]);		/* free list first */
	for (uint32_t i = 0; i < 4; i++)
		kvd_slab_free_block(&t->ns, ids[i]);
	assert_int_equal(t->pool.pages_used, 0);	/* all free: given back */
	assert_int_equal(t->ns.nr_slabs, 0);
	assert_false(t->ns.slabs[s].live);
	assert_int_equal(t->ns.blocks[ids[0]].state, KVD_BLOCK_NONE);
	assert_int_equal(t->pool.frees, 5);
	/* quota, then no slot left */
	t->ns.acct.max_pages = 1;
	assert_true(kvd_slab_new(&t->ns) >= 0);
	assert_int_equal(kvd_slab_new(&t->ns), -EDQUOT);
	t->ns.acct.max_pages = 0;
	assert_true(kvd_slab_new(&t->ns) >= 0);
	assert_int_equal(kvd_slab_new(&t->ns), -ENOSPC);
	assert_int_equal(t->pool.pages_used, 2);
}

/* Huge lcm: plain-page slabs, < 2% waste, blocks inside their slab. */
static void test_ns_odd_geometry_slabs(void **state)
{
	struct ctx *t = *state;
	uint32_t id, n = 0;

	ns_up(t, 64, &g_odd);
	assert_int_equal(t->ns.block_bytes, 332800);
	assert_int_equal(t->ns.slab_align, 1);
	assert_true(t->ns.slab_pages < 325);
	assert_int_equal(t->ns.max_blocks, 64 * KV_PAGE_BYTES / 332800);
	while (kvd_ns_alloc(&t->ns, &t->h[0], &id, 1) == 1) {
		assert_in_range(id, 0, t->ns.max_blocks - 1);
		assert_block_in_slab(&t->ns, id);
		assert_block_pages_used(&t->ns, id);
		n++;
	}
	assert_int_equal(n, t->ns.nr_blocks);
	assert_int_equal(t->ns.nr_slabs, 64 / t->ns.slab_pages);
	for (uint32_t s = 0; s < t->ns.max_slabs; s++) {
		const struct kvd_slab *sl = &t->ns.slabs[s];
		uint64_t waste = t->ns.slab_bytes -
				 (uint64_t)sl->nr_blocks * 332800;

		assert_true(sl->live);
		print_message("slab at page %u: %u blocks, waste %.2f%%\n",
			      sl->first_page, sl->nr_blocks,
			      100.0 * waste / t->ns.slab_bytes);
		assert_true(waste * 100 < 2 * t->ns.slab_bytes);
	}
}

/* The < 2% bound holds wherever the slab starts. */
static void test_ns_odd_geometry_any_start(void **state)
{
	struct ctx *t = *state;
	uint32_t id;

	for (uint32_t first = 0; first < 48; first++) {
		const struct kvd_slab *sl;
		uint64_t waste;

		assert_int_equal(kvd_pool_init(&t->pool, 64), 0);
		if (first)
			assert_int_equal(kvd_pool_alloc_run(&t->pool, first, 1),
					 0);
		assert_int_equal(kvd_ns_init(&t->ns, &t->pool, 0, "m", "",
					     &g_odd, 0, &t_key), 0);
		assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], &id, 1), 1);
		sl = &t->ns.slabs[t->ns.blocks[id].slab];
		assert_int_equal(sl->first_page, first);
		assert_block_in_slab(&t->ns, id);
		waste = t->ns.slab_bytes - (uint64_t)sl->nr_blocks * 332800;
		assert_true(waste * 100 < 2 * t->ns.slab_bytes);
		kvd_ns_release_all(&t->ns, &t->h[0]);
		assert_int_equal(t->pool.pages_used, first);
		kvd_ns_exit(&t->ns);
		kvd_pool_exit(&t->pool);
	}
}

static void test_ns_match(void **state)
{
	struct ctx *t = *state;
	struct kv_geometry g = g_2m;

	ns_up(t, 4, &g_2m);
	assert_true(kvd_ns_match(&t->ns, "model", "", &g_2m, 0));
	assert_false(kvd_ns_match(&t->ns, "model2", "", &g_2m, 0));
	g.block_tokens = 32;
	assert_false(kvd_ns_match(&t->ns, "model", "", &g, 0));
	assert_false(kvd_ns_match(&t->ns, "model", "", &g_2m, 1));	/* tenant */
	assert_false(kvd_ns_match(&t->ns, "model", "v2", &g_2m, 0));	/* revision */
	g = g_2m;
	g.tp_size = 2;				/* a tensor-parallel shard */
	assert_false(kvd_ns_match(&t->ns, "model", "", &g, 0));
}

/* ---- alloc ---- */

static void test_ns_alloc_distinct_ids(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[16];

	ns_up(t, 16, &g_2m);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 16), 16);
	for (uint32_t i = 0; i < 16; i++) {
		assert_in_range(ids[i], 0, t->ns.max_blocks - 1);
		for (uint32_t j = 0; j < i; j++)
			assert_int_not_equal(ids[i], ids[j]);
		assert_int_equal(t->ns.blocks[ids[i]].ref, 1);
		assert_int_equal(t->ns.blocks[ids[i]].state, KVD_BLOCK_HELD);
		assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[i]), 1);
		assert_int_equal(kvd_ns_hold_count(&t->ns, 11, ids[i]), 0);
		assert_block_pages_used(&t->ns, ids[i]);
	}
	assert_int_equal(t->ns.blocks_used, 16);
	assert_int_equal(t->pool.pages_used, 16);
	assert_int_equal(t->h[0].nr_blocks, 16);
	assert_int_equal(t->h[0].nr_refs, 16);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], ids, 1), -ENOSPC);
}

/* Blocks that share pages: the bytes of each lie in used pages. */
static void test_ns_alloc_bytes_in_used_pages(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[64];

	ns_up(t, 8, &g_512k);
	assert_int_equal(t->ns.slab_pages, 1);
	assert_int_equal(t->ns.max_blocks, 32);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 9), 9);
	assert_int_equal(t->pool.pages_used, 3);
	for (uint32_t i = 0; i < 9; i++) {
		assert_block_in_slab(&t->ns, ids[i]);
		assert_block_pages_used(&t->ns, ids[i]);
	}
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids + 9, 23), 23);
	for (uint32_t i = 0; i < 32; i++)
		assert_block_pages_used(&t->ns, ids[i]);
	assert_int_equal(t->pool.pages_used, 8);
}

static void test_ns_alloc_all_or_nothing(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[8], more[8];

	ns_up(t, 20, &g_5m);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 5), 5);
	assert_int_equal(t->pool.pages_used, 15);
	assert_int_equal(t->ns.nr_slabs, 3);
	/* One free block in slab 3, two in a new slab 4: one short. */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], more, 4), -ENOSPC);
	assert_int_equal(t->pool.pages_used, 15);
	assert_int_equal(t->ns.nr_slabs, 3);
	assert_int_equal(t->ns.nr_blocks, 6);
	assert_int_equal(t->ns.blocks_used, 5);
	assert_int_equal(t->ns.holds.nr + t->ns.holds.owned, 5);
	assert_int_equal(t->h[1].nr_blocks, 0);
	assert_int_equal(t->h[1].nr_refs, 0);
	assert_int_equal(t->h[1].head, KVD_NIL);
	assert_int_equal(t->h[0].nr_blocks, 5);
	/* And exactly what is left still comes out. */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], more, 3), 3);
	assert_int_equal(t->pool.pages_used, 20);
	assert_int_equal(t->ns.blocks_used, 8);
}

static void test_ns_alloc_einval_e2big(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[17];

	ns_up(t, 16, &g_2m);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 0), -EINVAL);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 17), -E2BIG);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, UINT32_MAX),
			 -E2BIG);
	assert_int_equal(t->pool.pages_used, 0);
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->h[0].nr_blocks, 0);
}

/* ---- release and ref ---- */

struct snap {
	uint32_t	ref[4];
	uint32_t	cnt[2][4];
	uint32_t	nr_blocks[2], nr_refs[2];
	uint32_t	blocks_used, pages_used;
};

static void snap_take(struct ctx *t, const uint32_t *ids, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	for (int i = 0; i < 4; i++) {
		s->ref[i] = t->ns.blocks[ids[i]].ref;
		for (int h = 0; h < 2; h++)
			s->cnt[h][i] = kvd_ns_hold_count(&t->ns, t->h[h].slot,
							 ids[i]);
	}
	for (int h = 0; h < 2; h++) {
		s->nr_blocks[h] = t->h[h].nr_blocks;
		s->nr_refs[h] = t->h[h].nr_refs;
	}
	s->blocks_used = t->ns.blocks_used;
	s->pages_used = t->pool.pages_used;
}

static void assert_unchanged(struct ctx *t, const uint32_t *ids,
			     const struct snap *before)
{
	struct snap now;

	snap_take(t, ids, &now);
	assert_memory_equal(&now, before, sizeof(now));
}

/* h0 holds a (twice) and b; h1 holds c and d. */
static void setup_abcd(struct ctx *t, uint32_t *ids)
{
	ns_up(t, 16, &g_512k);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 2), 2);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], ids + 2, 2), 2);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], ids, 1), 1);
}

static void test_ns_release_eperm(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], xy[2], bad[1];
	struct snap s;

	setup_abcd(t, ids);
	/* x: a free block in a live slab (y keeps the slab). */
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[2], xy, 2), 2);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[2], xy, 1), 1);
	assert_int_equal(t->ns.blocks[xy[0]].state, KVD_BLOCK_FREE);
	snap_take(t, ids, &s);
	/* Held by another holder. */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &ids[2], 1), -EPERM);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[1], &ids[0], 1), -EPERM);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], &xy[1], 1), -EPERM);
	/* Held by nobody: in a live slab, and in no slab at all. */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], xy, 1), -EPERM);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[2], xy, 1), -EPERM);
	bad[0] = t->ns.max_blocks - 1;
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], bad, 1), -EPERM);
	/* A third holder that holds nothing at all. */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[2], ids, 1), -EPERM);
	assert_unchanged(t, ids, &s);
}

static void test_ns_release_einval(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], bad[3];
	struct snap s;

	setup_abcd(t, ids);
	snap_take(t, ids, &s);
	bad[0] = t->ns.max_blocks;
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], bad, 1), -EINVAL);
	bad[0] = UINT32_MAX;
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], bad, 1), -EINVAL);
	/* After good ids: they are undone. */
	bad[0] = ids[0];
	bad[1] = ids[1];
	bad[2] = t->ns.max_blocks;
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], bad, 3), -EINVAL);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], ids, 0), -EINVAL);
	assert_unchanged(t, ids, &s);
}

static void test_ns_release_duplicates(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], dup[3];
	struct snap s;

	setup_abcd(t, ids);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[0]), 2);
	assert_int_equal(t->ns.blocks[ids[0]].ref, 2);
	snap_take(t, ids, &s);
	/* a is held twice: three times is once too often. */
	dup[0] = dup[1] = dup[2] = ids[0];
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], dup, 3), -EPERM);
	assert_unchanged(t, ids, &s);
	/* b once, then b again: held only once. */
	dup[0] = ids[1];
	dup[1] = ids[0];
	dup[2] = ids[1];
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], dup, 3), -EPERM);
	assert_unchanged(t, ids, &s);
	/* a and b once each is fine, and frees b. */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], dup + 1, 2), 2);
	assert_int_equal(t->ns.blocks[ids[1]].state, KVD_BLOCK_FREE);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[1]), 0);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[0]), 1);
	assert_int_equal(t->ns.blocks[ids[0]].ref, 1);
	assert_int_equal(t->h[0].nr_blocks, 1);
	assert_int_equal(t->h[0].nr_refs, 1);
	assert_int_equal(t->ns.blocks_used, 3);
	dup[0] = dup[1] = ids[0];
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], dup, 2), -EPERM);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], dup, 1), 1);
	assert_int_equal(t->h[0].nr_blocks, 0);
	assert_int_equal(t->h[0].nr_refs, 0);
	assert_int_equal(t->h[0].head, KVD_NIL);
	assert_int_equal(t->ns.blocks_used, 2);
}

/* A failure after good ids undoes them: counts and refs are kept. */
static void test_ns_release_all_or_nothing(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], mix[4];
	struct snap s;

	setup_abcd(t, ids);
	snap_take(t, ids, &s);
	mix[0] = ids[0];
	mix[1] = ids[1];
	mix[2] = ids[0];
	mix[3] = ids[3];	/* h1's */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], mix, 4), -EPERM);
	assert_unchanged(t, ids, &s);
	mix[3] = ids[1];	/* b a second time */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], mix, 4), -EPERM);
	assert_unchanged(t, ids, &s);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], mix, 3), 3);
	assert_int_equal(t->h[0].nr_blocks, 0);
	assert_int_equal(t->ns.blocks_used, 2);
}

static void test_ns_ref(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], v[3];
	struct snap s;

	setup_abcd(t, ids);
	assert_int_equal(t->h[0].nr_refs, 3);
	v[0] = ids[1];
	v[1] = ids[1];
	v[2] = ids[0];
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], v, 3), 3);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[0]), 3);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, ids[1]), 3);
	assert_int_equal(t->ns.blocks[ids[0]].ref, 3);
	assert_int_equal(t->ns.blocks[ids[1]].ref, 3);
	assert_int_equal(t->h[0].nr_refs, 6);
	assert_int_equal(t->h[0].nr_blocks, 2);
	assert_int_equal(t->ns.blocks_used, 4);

	snap_take(t, ids, &s);
	/* Not held by the caller: all or nothing. */
	v[2] = ids[2];
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], v, 3), -EPERM);
	v[2] = t->ns.max_blocks - 1;	/* in no slab */
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], v, 3), -EPERM);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[2], ids, 1), -EPERM);
	v[2] = t->ns.max_blocks;
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], v, 3), -EINVAL);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], v, 0), -EINVAL);
	assert_unchanged(t, ids, &s);
}

/*
 * Without max_client_blocks a client's refs in all stop at
 * KVD_CLIENT_REFS_MAX (-EDQUOT), far below where its u32 total would
 * wrap, however many blocks each carry up to KVD_REF_MAX.
 */
static void test_ns_ref_client_total(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4];
	struct snap s;

	setup_abcd(t, ids);
	t->h[0].nr_refs = KVD_CLIENT_REFS_MAX - 1;	/* as if REFed so far */
	assert_true(kvd_holder_room(&t->h[0], 1));
	assert_false(kvd_holder_room(&t->h[0], 2));
	t->h[0].nr_refs = KVD_CLIENT_REFS_MAX;
	snap_take(t, ids, &s);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], ids, 1), -EDQUOT);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids + 2, 1), -EDQUOT);
	assert_unchanged(t, ids, &s);
	t->h[0].nr_refs = 3;				/* its real count */
}

/* ---- copy on write ---- */

static void test_ns_cow(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[4], v[3], dst[3], a;
	const char *why = NULL;
	struct snap s;
	int n;

	setup_abcd(t, ids);
	a = ids[0];
	snap_take(t, ids, &s);

	/* errors first: nothing changes, no mark is left behind */
	v[0] = ids[1];
	v[1] = ids[2];			/* h1's */
	assert_int_equal(kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 2), -EPERM);
	v[1] = ids[1];			/* twice */
	assert_int_equal(kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 2), -EINVAL);
	v[1] = t->ns.max_blocks;
	assert_int_equal(kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 2), -EINVAL);
	assert_int_equal(kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 0), -EINVAL);
	for (int i = 0; i < 4; i++)
		assert_false(t->ns.blocks[ids[i]].mark);
	assert_unchanged(t, ids, &s);

	/* a is shared (two refs), b exclusive: only a gets a copy */
	v[0] = a;
	v[1] = ids[1];
	n = kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 2);
	assert_int_equal(n, 1);
	assert_int_not_equal(dst[0], KVD_NIL);
	assert_int_equal(dst[1], KVD_NIL);
	/* the copy failed: the new block goes, all as before */
	kvd_ns_cow_end(&t->ns, &t->h[0], v, dst, 2, false);
	assert_int_equal(v[0], a);
	assert_unchanged(t, ids, &s);

	n = kvd_ns_cow_begin(&t->ns, &t->h[0], v, dst, 2);
	assert_int_equal(n, 1);
	kvd_ns_cow_end(&t->ns, &t->h[0], v, dst, 2, true);
	assert_int_equal(v[0], dst[0]);
	assert_int_equal(v[1], ids[1]);
	assert_int_equal(t->ns.blocks[a].ref, 1);
	assert_int_equal(t->ns.blocks[v[0]].ref, 1);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, a), 1);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, v[0]), 1);
	assert_int_equal(t->h[0].nr_refs, 3);
	assert_int_equal(t->ns.blocks_used, 5);
	assert_int_equal(kvd_ns_check(&t->ns, &why), 0);

	/* no room for a copy: -ENOSPC, nothing changes */
	while (kvd_ns_alloc(&t->ns, &t->h[2], dst, 1) == 1)
		;
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], &a, 1), 1);
	snap_take(t, ids, &s);
	assert_int_equal(kvd_ns_cow_begin(&t->ns, &t->h[0], &a, dst, 1),
			 -ENOSPC);
	assert_unchanged(t, ids, &s);
	assert_int_equal(kvd_ns_check(&t->ns, &why), 0);
}

/* ---- slabs back to the pool ---- */

static void test_ns_free_slab_returns_to_pool(void **state)
{
	struct ctx *t = *state;
	uint32_t ids[6];

	ns_up(t, 4, &g_512k);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], ids, 6), 6);
	assert_int_equal(t->pool.pages_used, 2);
	assert_int_equal(t->ns.nr_slabs, 2);
	assert_int_equal(t->ns.nr_blocks, 8);
	/* Free the two blocks of the second slab... */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], ids + 4, 2), 2);
	assert_int_equal(t->pool.pages_used, 1);
	assert_int_equal(t->ns.nr_slabs, 1);
	assert_int_equal(t->ns.nr_blocks, 4);
	for (uint32_t i = 4; i < 6; i++)
		assert_int_equal(t->ns.blocks[ids[i]].state, KVD_BLOCK_NONE);
	/* ...and all but one of the first: the slab stays. */
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], ids, 3), 3);
	assert_int_equal(t->pool.pages_used, 1);
	assert_int_equal(kvd_ns_release(&t->ns, &t->h[0], ids + 3, 1), 1);
	assert_int_equal(t->pool.pages_used, 0);
	assert_int_equal(t->pool.peak_pages_used, 2);
	assert_int_equal(t->ns.nr_slabs, 0);
	assert_int_equal(t->ns.nr_blocks, 0);
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->ns.holds.nr + t->ns.holds.owned, 0);
	for (uint32_t i = 0; i < t->ns.max_blocks; i++)
		assert_int_equal(t->ns.blocks[i].state, KVD_BLOCK_NONE);
	/* The memory is there for the next slab (of any namespace). */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 4, 4), 0);
	kvd_pool_free_run(&t->pool, 0, 4);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], ids, 6), 6);
	assert_int_equal(t->pool.pages_used, 2);
}

static void test_ns_release_all(void **state)
{
	struct ctx *t = *state;
	uint32_t a[6], b[2];

	ns_up(t, 8, &g_512k);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[0], a, 6), 6);
	assert_int_equal(kvd_ns_alloc(&t->ns, &t->h[1], b, 2), 2);
	assert_int_equal(kvd_ns_ref(&t->ns, &t->h[0], a, 3), 3);
	/* a[0] is held by both: twice by h0, twice by h1. */
	share(&t->ns, &t->h[1], a[0]);
	share(&t->ns, &t->h[1], a[0]);
	assert_int_equal(t->ns.blocks[a[0]].ref, 4);
	assert_int_equal(t->pool.pages_used, 2);

	kvd_ns_release_all(&t->ns, &t->h[0]);
	assert_int_equal(t->h[0].head, KVD_NIL);
	assert_int_equal(t->h[0].nr_blocks, 0);
	assert_int_equal(t->h[0].nr_refs, 0);
	assert_int_equal(t->ns.blocks[a[0]].ref, 2);
	assert_int_equal(t->ns.blocks[a[0]].state, KVD_BLOCK_HELD);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 10, a[0]), 0);
	assert_int_equal(kvd_ns_hold_count(&t->ns, 11, a[0]), 2);
	for (int i = 1; i < 6; i++) {
		assert_int_not_equal(t->ns.blocks[a[i]].state, KVD_BLOCK_HELD);
		assert_int_equal(kvd_ns_hold_count(&t->ns, 10, a[i]), 0);
	}
	assert_int_equal(t->ns.blocks_used, 3);
	assert_int_equal(t->h[1].nr_blocks, 3);
	assert_int_equal(t->h[1].nr_refs, 4);
	assert_int_equal(t->ns.holds.nr + t->ns.holds.owned, 3);
	assert_block_pages_used(&t->ns, a[0]);
	/* Again: nothing left to drop. */
	kvd_ns_release_all(&t->ns, &t->h[0]);
	assert_int_equal(t->ns.blocks_used, 3);

	kvd_ns_release_all(&t->ns, &t->h[1]);
	assert_int_equal(t->ns.blocks_used, 0);
	assert_int_equal(t->ns.nr_slabs, 0);
	assert_int_equal(t->ns.holds.nr + t->ns.holds.owned, 0);
	assert_int_equal(t->pool.pages_used, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ns_geometry_check_errors),
		T(test_ns_geometry_check_ok),
		T(test_ns_geometry_check_opaque),
		T(test_ns_init_geometry_2m),
		T(test_ns_init_geometry_5m),
		T(test_ns_init_too_big),
		T(test_slab_carve_free),
		T(test_ns_odd_geometry_slabs),
		T(test_ns_odd_geometry_any_start),
		T(test_ns_match),
		T(test_ns_alloc_distinct_ids),
		T(test_ns_alloc_bytes_in_used_pages),
		T(test_ns_alloc_all_or_nothing),
		T(test_ns_alloc_einval_e2big),
		T(test_ns_release_eperm),
		T(test_ns_release_einval),
		T(test_ns_release_duplicates),
		T(test_ns_release_all_or_nothing),
		T(test_ns_ref),
		T(test_ns_ref_client_total),
		T(test_ns_cow),
		T(test_ns_free_slab_returns_to_pool),
		T(test_ns_release_all),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
