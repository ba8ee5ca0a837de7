/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the namespace tests (test_ns.c, test_ns_stress.c): a
 * pool, a namespace over it, NR_HOLDERS holders, and share(), which does
 * what a prefix hit does with the hold table's own functions.
 */
#ifndef KV_TEST_NS_UTIL_H
#define KV_TEST_NS_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ns_internal.h"

#define MIB		(1ULL << 20)
#define GEOM(l, k, d, t, dt)	{ .layers = (l), .kv_heads = (k), \
				  .head_dim = (d), .block_tokens = (t), \
				  .dtype = (dt) }
#define NR_HOLDERS	3
#define __maybe_unused	__attribute__((unused))	/* not every test uses all */

/* 32 layers, 8 kv heads, 128 dim, 16 tokens, fp16: 2 MiB. */
static const struct kv_geometry g_2m __maybe_unused =
	GEOM(32, 8, 128, 16, KV_DTYPE_FP16);
/* 80 layers: 5 MiB, slabs of lcm(2, 5) = 10 MiB. */
static const struct kv_geometry g_5m __maybe_unused =
	GEOM(80, 8, 128, 16, KV_DTYPE_FP16);
/* 16 layers, 8 tokens: 512 KiB, four blocks a page. */
static const struct kv_geometry g_512k __maybe_unused =
	GEOM(16, 8, 128, 8, KV_DTYPE_FP16);
/* 332800 bytes = 2^10 * 325: lcm with 2 MiB is 325 pages. */
static const struct kv_geometry g_odd __maybe_unused =
	GEOM(13, 5, 80, 16, KV_DTYPE_FP16);

struct ctx {
	struct kvd_pool	pool;
	struct kvd_ns	ns;
	struct kvd_holder h[NR_HOLDERS];
};

static inline int ctx_setup(void **state)
{
	struct ctx *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	for (uint32_t i = 0; i < NR_HOLDERS; i++)
		kvd_holder_init(&t->h[i], 10 + i);
	*state = t;
	return 0;
}

static inline int ctx_teardown(void **state)
{
	struct ctx *t = *state;

	kvd_ns_exit(&t->ns);
	kvd_pool_exit(&t->pool);
	free(t);
	return 0;
}

/* A tenant key for the tests: any bytes do. */
static const struct kvd_tenant_key t_key = { { 1 } };

static inline void ns_up(struct ctx *t, uint32_t pages, const struct kv_geometry *g)
{
	assert_int_equal(kvd_pool_init(&t->pool, pages), 0);
	assert_int_equal(kvd_ns_init(&t->ns, &t->pool, 0, "model", "", g, 0,
				     &t_key), 0);
}

/* What a prefix hit will do: @to takes one more ref on held block @id. */
static inline void share(struct kvd_ns *ns, struct kvd_holder *to, uint32_t id)
{
	uint32_t *c = kvd_hold_counter(ns, to->slot, id);

	assert_int_equal(ns->blocks[id].state, KVD_BLOCK_HELD);
	if (!c) {
		kvd_hold_add(ns, to, id);
	} else {
		(*c)++;
		to->nr_refs++;
	}
	ns->blocks[id].ref++;
}

/* Every page that holds a byte of block @id belongs to a slab. */
static inline void assert_block_pages_used(const struct kvd_ns *ns, uint32_t id)
{
	uint64_t start = (uint64_t)id * ns->block_bytes;
	uint64_t end = start + ns->block_bytes;

	assert_true(end <= ns->pool->bytes);
	for (uint64_t p = start / KV_PAGE_BYTES; p * KV_PAGE_BYTES < end; p++)
		assert_true(kvd_pool_page_used(ns->pool, (uint32_t)p));
}

/* Block @id lies inside its slab, which is live. */
static inline void assert_block_in_slab(const struct kvd_ns *ns, uint32_t id)
{
	const struct kvd_slab *s = &ns->slabs[ns->blocks[id].slab];
	uint64_t start = (uint64_t)s->first_page * KV_PAGE_BYTES;

	assert_true(s->live);
	assert_in_range(id, s->first_block, s->first_block + s->nr_blocks - 1);
	assert_true((uint64_t)id * ns->block_bytes >= start);
	assert_true((uint64_t)(id + 1) * ns->block_bytes <=
		    start + ns->slab_bytes);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, ctx_setup, ctx_teardown)

#endif
