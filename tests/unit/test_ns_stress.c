// SPDX-License-Identifier: MIT
/*
 * Namespaces under random alloc, ref, share and release by NR_HOLDERS
 * holders, checked after every step against a shadow model of each
 * holder's refs (kvd/ns.c over slab.c and hold.c), for three geometries.
 */
#include "test_ns_util.h"

/* ---- stress against a shadow model ---- */

struct model {
	struct ctx	*t;
	uint32_t	max;
	uint32_t	*cnt[NR_HOLDERS];	/* [max_blocks] each */
	uint32_t	*pick;			/* [max_blocks * 8] */
	bool		aligned;		/* lcm slabs: exact -ENOSPC */
	uint32_t	nr_ok, nr_enospc, nr_err;	/* what the steps met */
};

static uint32_t rnd(uint32_t n)
{
	return (uint32_t)rand() % n;
}

static uint32_t model_sum(const struct model *m, uint32_t id)
{
	uint32_t s = 0;

	for (int h = 0; h < NR_HOLDERS; h++)
		s += m->cnt[h][id];
	return s;
}

static void model_check(const struct model *m)
{
	const struct kvd_ns *ns = &m->t->ns;
	uint32_t used = 0, holds = 0, blocks[NR_HOLDERS] = { 0 };
	uint32_t refs[NR_HOLDERS] = { 0 };

	for (uint32_t id = 0; id < m->max; id++) {
		uint32_t sum = model_sum(m, id);

		for (int h = 0; h < NR_HOLDERS; h++) {
			uint32_t c = m->cnt[h][id];

			assert_int_equal(kvd_ns_hold_count(ns, 10 + h, id), c);
			blocks[h] += c > 0;
			refs[h] += c;
			holds += c > 0;
		}
		if (!sum) {
			assert_int_not_equal(ns->blocks[id].state,
					     KVD_BLOCK_HELD);
			continue;
		}
		used++;
		assert_int_equal(ns->blocks[id].state, KVD_BLOCK_HELD);
		assert_int_equal(ns->blocks[id].ref, sum);
		assert_block_in_slab(ns, id);
		assert_block_pages_used(ns, id);
	}
	assert_int_equal(ns->blocks_used, used);
	assert_int_equal(ns->holds.nr + ns->holds.owned, holds);
	for (int h = 0; h < NR_HOLDERS; h++) {
		assert_int_equal(m->t->h[h].nr_blocks, blocks[h]);
		assert_int_equal(m->t->h[h].nr_refs, refs[h]);
	}
	assert_int_equal(m->t->pool.pages_used, ns->nr_slabs * ns->slab_pages);
}

/* Up to @n ids that holder @h holds, each at most as often as held. */
static uint32_t model_pick(struct model *m, int h, uint32_t *out, uint32_t n)
{
	uint32_t nr = 0, k = 0;

	for (uint32_t id = 0; id < m->max; id++)
		for (uint32_t c = 0; c < m->cnt[h][id] && c < 8; c++)
			m->pick[nr++] = id;
	while (k < n && nr) {
		uint32_t i = rnd(nr);

		out[k++] = m->pick[i];
		m->pick[i] = m->pick[--nr];
	}
	return k;
}

static void step_alloc(struct model *m, int h)
{
	struct kvd_ns *ns = &m->t->ns;
	uint32_t ids[16], nr = 1 + rnd(rnd(4) ? 4 : 16);
	int ret = kvd_ns_alloc(ns, &m->t->h[h], ids, nr);

	if (nr > m->max) {
		assert_int_equal(ret, -E2BIG);
		return;
	}
	if (ret == -ENOSPC) {
		uint64_t room = ns->nr_blocks - ns->blocks_used +
			(uint64_t)(ns->max_slabs - ns->nr_slabs) *
			(ns->slab_bytes / ns->block_bytes);

		if (m->aligned)
			assert_true(room < nr);
		m->nr_enospc++;
		return;
	}
	assert_int_equal(ret, nr);
	m->nr_ok++;
	for (uint32_t i = 0; i < nr; i++) {
		assert_in_range(ids[i], 0, m->max - 1);
		assert_int_equal(model_sum(m, ids[i]), 0);
		m->cnt[h][ids[i]] = 1;	/* a duplicate fails next check */
	}
}

static void step_ref(struct model *m, int h)
{
	uint32_t ids[5], n = model_pick(m, h, ids, 1 + rnd(4));

	if (!n)
		return;
	if (rnd(2))
		ids[n++] = ids[0];	/* twice the same is fine */
	assert_int_equal(kvd_ns_ref(&m->t->ns, &m->t->h[h], ids, n), n);
	for (uint32_t i = 0; i < n; i++)
		m->cnt[h][ids[i]]++;
}

static void step_release(struct model *m, int h)
{
	uint32_t ids[5], n = model_pick(m, h, ids, 1 + rnd(4));
	int bad = rnd(4), err = 0;

	if (!n)
		return;
	if (!bad) {
		/* One entry too many: something h does not hold (enough). */
		uint32_t id = rnd(m->max);

		err = m->cnt[h][id] > 0 ? 0 : -EPERM;
		if (!err) {
			uint32_t seen = 0;

			for (uint32_t i = 0; i < n; i++)
				seen += ids[i] == id;
			err = seen + 1 > m->cnt[h][id] ? -EPERM : 0;
		}
		if (rnd(8) == 0) {
			id = m->max + rnd(3);
			err = -EINVAL;
		}
		ids[n++] = id;
	}
	if (err) {
		assert_int_equal(kvd_ns_release(&m->t->ns, &m->t->h[h], ids, n),
				 err);
		m->nr_err++;
		return;
	}
	assert_int_equal(kvd_ns_release(&m->t->ns, &m->t->h[h], ids, n), n);
	for (uint32_t i = 0; i < n; i++)
		m->cnt[h][ids[i]]--;
}

static void step_share(struct model *m, int h)
{
	uint32_t id, from = rnd(NR_HOLDERS);

	if (!model_pick(m, (int)from, &id, 1))
		return;
	share(&m->t->ns, &m->t->h[h], id);
	m->cnt[h][id]++;
}

static void stress(struct ctx *t, uint32_t pages, const struct kv_geometry *g,
		   bool aligned, unsigned int seed)
{
	struct model m = { .t = t, .aligned = aligned };

	srand(seed);
	ns_up(t, pages, g);
	m.max = t->ns.max_blocks;
	for (int h = 0; h < NR_HOLDERS; h++)
		m.cnt[h] = calloc(m.max, sizeof(uint32_t));
	m.pick = calloc((size_t)m.max * 8 * NR_HOLDERS, sizeof(uint32_t));
	for (int step = 0; step < 3000; step++) {
		int h = (int)rnd(NR_HOLDERS), op = (int)rnd(100);

		if (op < 35)
			step_alloc(&m, h);
		else if (op < 50)
			step_ref(&m, h);
		else if (op < 88)
			step_release(&m, h);
		else if (op < 97)
			step_share(&m, h);
		else {
			kvd_ns_release_all(&t->ns, &t->h[h]);
			memset(m.cnt[h], 0, m.max * sizeof(uint32_t));
		}
		model_check(&m);
	}
	for (int h = 0; h < NR_HOLDERS; h++) {
		kvd_ns_release_all(&t->ns, &t->h[h]);
		memset(m.cnt[h], 0, m.max * sizeof(uint32_t));
	}
	model_check(&m);
	assert_int_equal(t->pool.pages_used, 0);
	print_message("%u allocs, %u -ENOSPC, %u bad releases, peak %u pages\n",
		      m.nr_ok, m.nr_enospc, m.nr_err,
		      t->pool.peak_pages_used);
	assert_true(m.nr_enospc > 0 && m.nr_err > 0);
	for (int h = 0; h < NR_HOLDERS; h++)
		free(m.cnt[h]);
	free(m.pick);
}

static void test_ns_stress_512k(void **state)
{
	stress(*state, 8, &g_512k, true, 1);
}

static void test_ns_stress_5m(void **state)
{
	stress(*state, 21, &g_5m, true, 2);
}

static void test_ns_stress_odd(void **state)
{
	stress(*state, 40, &g_odd, false, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ns_stress_512k),
		T(test_ns_stress_5m),
		T(test_ns_stress_odd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
