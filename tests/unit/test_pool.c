// SPDX-License-Identifier: MIT
/*
 * The page pool (kvd/pool.c): aligned runs out of a free-page bitmap,
 * accounting, and a randomised comparison with a brute-force model.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pool.h"

struct ctx {
	struct kvd_pool	pool;
};

static int ctx_setup(void **state)
{
	struct ctx *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	*state = t;
	return 0;
}

static int ctx_teardown(void **state)
{
	struct ctx *t = *state;

	kvd_pool_exit(&t->pool);
	free(t);
	return 0;
}

/* Take exactly the pages named in @used (a string of '0' and '1'). */
static void pool_mark(struct kvd_pool *pool, const char *used)
{
	for (uint32_t p = 0; used[p]; p++) {
		if (used[p] != '1')
			continue;
		while (!kvd_pool_page_used(pool, p))
			assert_true(kvd_pool_alloc_run(pool, 1, 1) >= 0);
	}
	/* Give back the singles taken on the way that @used wants free. */
	for (uint32_t p = 0; used[p]; p++)
		if (used[p] != '1' && kvd_pool_page_used(pool, p))
			kvd_pool_free_run(pool, p, 1);
}

static void assert_used(const struct kvd_pool *pool, const char *used)
{
	uint32_t n = 0;

	for (uint32_t p = 0; used[p]; p++) {
		assert_int_equal(kvd_pool_page_used(pool, p), used[p] == '1');
		n += used[p] == '1';
	}
	assert_int_equal(pool->pages_used, n);
}

static void test_pool_init(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 0), -EINVAL);
	assert_null(t->pool.used);
	assert_int_equal(kvd_pool_init(&t->pool, 130), 0);
	assert_int_equal(t->pool.nr_pages, 130);
	assert_true(t->pool.bytes == 130ULL * KV_PAGE_BYTES);
	assert_int_equal(t->pool.pages_used, 0);
	assert_int_equal(t->pool.peak_pages_used, 0);
	for (uint32_t p = 0; p < 130; p++)
		assert_false(kvd_pool_page_used(&t->pool, p));
	/* Out of range pages are never used. */
	assert_false(kvd_pool_page_used(&t->pool, 130));
	assert_false(kvd_pool_page_used(&t->pool, UINT32_MAX));
}

/* The worked example of pool.c's top comment. */
static void test_pool_worked_example(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 8), 0);
	pool_mark(&t->pool, "01001000");
	assert_used(&t->pool, "01001000");
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), 2);
	assert_used(&t->pool, "01111000");
	/* Next aligned pair: 4 is used, so [6, 8). */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), 6);
	assert_used(&t->pool, "01111011");
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), -ENOSPC);
}

static void test_pool_alignment_skips(void **state)
{
	struct ctx *t = *state;

	/* Odd alignments, as lcm(page, block) gives: 5 pages for 5 MiB. */
	assert_int_equal(kvd_pool_init(&t->pool, 17), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 1), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 5, 5), 5);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 5, 5), 10);
	/* [15, 20) does not fit in 17 pages; 1..4 are free but unaligned. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 5, 5), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 3), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 3), 3);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 1), 1);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 1), 15);
	assert_int_equal(t->pool.pages_used, 17);
	/* A run needs nr clear pages from an aligned start, not just one. */
	kvd_pool_free_run(&t->pool, 5, 5);
	kvd_pool_free_run(&t->pool, 11, 2);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 4), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 3), 6);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 4), -ENOSPC);
	/* Pages 11 and 12 are free, but 11 is odd. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 1), 11);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 1), 5);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 1), 9);
	assert_int_equal(t->pool.pages_used, 17);
}

static void test_pool_exhaustion(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 12), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 3), 3 * i);
	assert_int_equal(t->pool.pages_used, 12);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 1), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 3), -ENOSPC);
	/* A failed run changes nothing. */
	assert_int_equal(t->pool.pages_used, 12);
	assert_int_equal(t->pool.peak_pages_used, 12);
	/* Larger than the pool: no run, no overflow. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 13, 1), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, UINT32_MAX, 1), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, UINT32_MAX), -ENOSPC);
}

static void test_pool_free_then_reuse(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 16), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvd_pool_alloc_run(&t->pool, 4, 4), 4 * i);
	kvd_pool_free_run(&t->pool, 8, 4);
	for (uint32_t p = 8; p < 12; p++)
		assert_false(kvd_pool_page_used(&t->pool, p));
	assert_true(kvd_pool_page_used(&t->pool, 7));
	assert_true(kvd_pool_page_used(&t->pool, 12));
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 4, 4), 8);
	kvd_pool_free_run(&t->pool, 0, 4);
	kvd_pool_free_run(&t->pool, 12, 4);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 4, 4), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), 12);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), 14);
	assert_int_equal(t->pool.pages_used, 16);
}

static void test_pool_accounting(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 32), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 5, 1), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 7, 1), 5);
	assert_int_equal(t->pool.pages_used, 12);
	assert_int_equal(t->pool.peak_pages_used, 12);
	kvd_pool_free_run(&t->pool, 0, 5);
	assert_int_equal(t->pool.pages_used, 7);
	assert_int_equal(t->pool.peak_pages_used, 12);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 1), 0);
	assert_int_equal(t->pool.pages_used, 10);
	assert_int_equal(t->pool.peak_pages_used, 12);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 20, 4), 12);
	assert_int_equal(t->pool.pages_used, 30);
	assert_int_equal(t->pool.peak_pages_used, 30);
	kvd_pool_free_run(&t->pool, 12, 20);
	kvd_pool_free_run(&t->pool, 0, 3);
	kvd_pool_free_run(&t->pool, 5, 7);
	assert_int_equal(t->pool.pages_used, 0);
	assert_int_equal(t->pool.peak_pages_used, 30);
}

static void test_pool_einval(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 4), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 0, 1), -EINVAL);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 0), -EINVAL);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 0, 0), -EINVAL);
	assert_used(&t->pool, "0000");
	assert_int_equal(t->pool.peak_pages_used, 0);
}

static void test_pool_run_at_end(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 10), 0);
	/* The whole pool is one run. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 10, 1), 0);
	kvd_pool_free_run(&t->pool, 0, 10);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 10, 10), 0);
	kvd_pool_free_run(&t->pool, 0, 10);
	/* [5, 10) ends exactly at the last page. */
	pool_mark(&t->pool, "1000000000");
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 5, 5), 5);
	assert_used(&t->pool, "1000011111");
	kvd_pool_free_run(&t->pool, 5, 5);
	/* Last page alone, with an alignment that only it meets. */
	pool_mark(&t->pool, "1111111110");
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 9), 9);
	assert_used(&t->pool, "1111111111");
	kvd_pool_free_run(&t->pool, 9, 1);
	/* One page short at the end. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 9), -ENOSPC);
}

/* Runs across bitmap words (64 pages a word on LP64). */
static void test_pool_word_boundaries(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 200), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 60, 1), 0);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 10, 1), 60);
	for (uint32_t p = 0; p < 70; p++)
		assert_true(kvd_pool_page_used(&t->pool, p));
	assert_false(kvd_pool_page_used(&t->pool, 70));
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 130, 70), 70);
	assert_int_equal(t->pool.pages_used, 200);
	kvd_pool_free_run(&t->pool, 60, 10);
	assert_true(kvd_pool_page_used(&t->pool, 59));
	assert_false(kvd_pool_page_used(&t->pool, 63));
	assert_false(kvd_pool_page_used(&t->pool, 64));
	assert_true(kvd_pool_page_used(&t->pool, 70));
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 10, 1), 60);
}

/* Enough pages are free, but no aligned run of them. */
static void test_pool_fragmentation(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 8), 0);
	pool_mark(&t->pool, "01010101");
	assert_int_equal(t->pool.nr_pages - t->pool.pages_used, 4);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 1), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 1, 2), 0);
	kvd_pool_free_run(&t->pool, 0, 1);
	kvd_pool_free_run(&t->pool, 1, 1);
	kvd_pool_free_run(&t->pool, 5, 1);
	pool_mark(&t->pool, "10011001");
	/* Free runs [1, 3) and [5, 7): two pages each, both at odd starts. */
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 2), -ENOSPC);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 3, 1), -ENOSPC);
	assert_used(&t->pool, "10011001");
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 1), 1);
	assert_int_equal(kvd_pool_alloc_run(&t->pool, 2, 5), 5);
	assert_used(&t->pool, "11111111");
}

/* Brute force: the lowest aligned start whose nr pages are all free. */
static int64_t model_find(const uint8_t *used, uint32_t n, uint32_t nr,
			  uint32_t align)
{
	for (uint64_t s = 0; s + nr <= n; s += align) {
		uint32_t i = 0;

		while (i < nr && !used[s + i])
			i++;
		if (i == nr)
			return (int64_t)s;
	}
	return -ENOSPC;
}

struct run {
	uint32_t	first, nr;
};

static void test_pool_random_vs_model(void **state)
{
	struct ctx *t = *state;
	const uint32_t n = 150;
	uint8_t used[150] = { 0 };
	struct run runs[150];
	uint32_t nr_runs = 0, nr_used = 0, peak = 0;

	srand(1);
	assert_int_equal(kvd_pool_init(&t->pool, n), 0);
	for (int step = 0; step < 20000; step++) {
		if (nr_runs && rand() % 2) {
			uint32_t k = (uint32_t)rand() % nr_runs;
			struct run r = runs[k];

			kvd_pool_free_run(&t->pool, r.first, r.nr);
			memset(used + r.first, 0, r.nr);
			nr_used -= r.nr;
			runs[k] = runs[--nr_runs];
		} else {
			uint32_t nr = 1 + (uint32_t)rand() % 12;
			uint32_t align = 1 + (uint32_t)rand() % 7;
			int64_t want = model_find(used, n, nr, align);
			int64_t got = kvd_pool_alloc_run(&t->pool, nr, align);

			assert_int_equal(got, want);
			if (got < 0)
				continue;
			memset(used + got, 1, nr);
			nr_used += nr;
			runs[nr_runs++] = (struct run){ (uint32_t)got, nr };
		}
		if (nr_used > peak)
			peak = nr_used;
		assert_int_equal(t->pool.pages_used, nr_used);
		assert_int_equal(t->pool.peak_pages_used, peak);
		for (uint32_t p = 0; p < n; p++)
			assert_int_equal(kvd_pool_page_used(&t->pool, p),
					 used[p]);
	}
}

static int32_t claims[8];
static int nr_claims;

static int record_claim(struct kvd_pool *pool, uint32_t ext, int32_t owner)
{
	(void)pool;
	claims[nr_claims++ % 8] = (int32_t)(ext << 8) | owner;
	return 0;
}

/*
 * Extents of 4 pages: a tenant only gets runs in extents that are its
 * own or unused; an extent is free again when its last page is; the
 * claim hook runs when an extent starts being used by a tenant.
 */
static void test_pool_extents_keep_tenants_apart(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 16), 0);
	assert_int_equal(kvd_pool_set_extents(&t->pool, 4), 0);
	assert_int_equal(t->pool.nr_extents, 4);
	t->pool.on_claim = record_claim;
	nr_claims = 0;
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 1, 1, 1), 0);
	assert_int_equal(t->pool.ext_owner[0], 1);
	/* tenant 2 may not share extent 0: its run starts in extent 1 */
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 2, 1, 2), 4);
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 1, 1, 1), 1);
	/* a 3-page run for tenant 1 does not fit extent 0's rest (2 pages)
	 * and may not touch extent 1: it goes to extent 2 */
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 3, 1, 1), 8);
	assert_int_equal(nr_claims, 3);		/* extents 0, 1, 2 */
	/* runs may span two extents of one tenant, never another's */
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 2, 1, 2), 6);
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 1, 2), 12);
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 1, 1, 2), -ENOSPC);
	/* extent 1 goes free with its last page, then tenant 1 may have it */
	kvd_pool_free_run(&t->pool, 4, 2);
	kvd_pool_free_run(&t->pool, 6, 2);
	assert_int_equal(t->pool.ext_owner[1], KVD_EXT_FREE);
	assert_int_equal(t->pool.ext_last[1], 2);
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 4, 1), 4);
	assert_int_equal(t->pool.ext_owner[1], 1);
	assert_int_equal(claims[(nr_claims - 1) % 8], (1 << 8) | 1);
}

static int fail_ext = -1;

static int claim_fails(struct kvd_pool *pool, uint32_t ext, int32_t owner)
{
	(void)pool;
	(void)owner;
	return (int)ext == fail_ext ? -ENOMEM : 0;
}

/*
 * A claim that fails undoes the run, and the extents past it, never
 * claimed, still say whose bytes they hold (the earlier tenant's), so
 * the next claim makes them fresh (found by a hostile test: a tenant got
 * half a block of another's bytes).
 */
static void test_pool_claim_failure_keeps_last_owner(void **state)
{
	struct ctx *t = *state;

	assert_int_equal(kvd_pool_init(&t->pool, 8), 0);
	assert_int_equal(kvd_pool_set_extents(&t->pool, 2), 0);
	t->pool.on_claim = claim_fails;
	/* tenant 2 uses extents 0 and 1, then frees them */
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 4, 2), 0);
	kvd_pool_free_run(&t->pool, 0, 4);
	assert_int_equal(t->pool.ext_last[1], 2);
	/* tenant 1: extent 0 cannot be backed */
	fail_ext = 0;
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 4, 1), -ENOMEM);
	assert_int_equal(t->pool.pages_used, 0);
	assert_int_equal(t->pool.ext_owner[0], KVD_EXT_FREE);
	assert_int_equal(t->pool.ext_owner[1], KVD_EXT_FREE);
	assert_int_equal(t->pool.ext_last[0], 2);
	assert_int_equal(t->pool.ext_last[1], 2);
	assert_int_equal(t->pool.ext_used[0], 0);
	assert_int_equal(t->pool.ext_used[1], 0);
	/* extent 1 fails now: extent 0 was claimed (fresh, tenant 1's) */
	fail_ext = 1;
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 4, 1), -ENOMEM);
	assert_int_equal(t->pool.ext_last[0], 1);
	assert_int_equal(t->pool.ext_last[1], 2);
	fail_ext = -1;
	assert_int_equal(kvd_pool_alloc_run_for(&t->pool, 4, 4, 1), 0);
	assert_int_equal(t->pool.ext_last[1], 1);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, ctx_setup, ctx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_pool_init),
		T(test_pool_worked_example),
		T(test_pool_alignment_skips),
		T(test_pool_exhaustion),
		T(test_pool_free_then_reuse),
		T(test_pool_accounting),
		T(test_pool_einval),
		T(test_pool_run_at_end),
		T(test_pool_word_boundaries),
		T(test_pool_fragmentation),
		T(test_pool_random_vs_model),
		T(test_pool_extents_keep_tenants_apart),
		T(test_pool_claim_failure_keeps_last_owner),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
