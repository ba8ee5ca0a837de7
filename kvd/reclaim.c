// SPDX-License-Identifier: MIT
/*
 * Room for a request, and reclaim across namespaces: whether an ALLOC
 * can succeed before anything is evicted (kvd_ns_room_check, which
 * rehearses reclaim on a map of the pool's pages), and reclaim itself
 * (kvd_ns_reclaim), which evicts only whole slabs none of whose blocks
 * is held, coldest first, and only those that free the aligned run of
 * pages asked for. Under ns.c, over prefix.c, slab.c and pool.c: it
 * calls nothing above it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ns_internal.h"

/* ---- eviction and reclaim ---- */

/* Can @ns give up @pages without going below its or its tenant's min? */
static bool ns_reclaimable(const struct kvd_ns *ns, uint32_t pages)
{
	if (ns->acct.pages < ns->acct.min_pages + pages)
		return false;
	return !ns->tacct || ns->tacct->pages >= ns->tacct->min_pages + pages;
}

/*
 * A slab whose pages evicting its cached blocks gives back: none of its
 * blocks held, and none with a committed child in another slab. The
 * second rule keeps eviction leaf first across slabs: a cached parent
 * here with a cached child elsewhere waits until the child's slab (or
 * its namespace's own LRU) has dropped the child; it is never evicted
 * under a child, held or cached, that would then hang from a block
 * reused for something else. Within the slab, parents go after their
 * children (slab_evict).
 */
static bool slab_reclaimable(const struct kvd_slab *sl)
{
	return sl->live && !sl->nr_held && !sl->nr_out;
}

/*
 * slab_evict - evict every cached block of slab @s of @ns (reclaimable),
 * leaf first: a parent in the slab goes right after its last child. The
 * last one gives the slab's pages back to the pool. Returns how many.
 */
static uint32_t slab_evict(struct kvd_ns *ns, uint32_t s)
{
	struct kvd_slab *sl = &ns->slabs[s];
	uint32_t left = sl->nr_blocks - sl->nr_free, n = 0;
	uint32_t first = sl->first_block, carved = sl->nr_carved;

	for (uint32_t i = 0; i < carved && left; i++) {
		uint32_t id = first + i;

		while (left && ns->blocks[id].slab == s &&
		       ns->blocks[id].state == KVD_BLOCK_CACHED &&
		       !ns->blocks[id].nr_children) {
			uint32_t p = ns->blocks[id].parent;

			kvd_prefix_evict_leaf(ns, id);
			kvd_evicted(ns, id);
			kvd_slab_free_block(ns, id);	/* the last: sl goes */
			left--;
			n++;
			if (p == KVD_NIL)
				break;
			id = p;
		}
	}
	kvd_warn_on_once(left);
	return n;
}

/*
 * The pool's pages as the reclaim of one slab for @ns sees them: free,
 * busy (ours, or in a slab that cannot be reclaimed), or in a
 * reclaimable slab of another namespace (pns: its index in pool->ns,
 * pslab: the slab). given: pages taken from each namespace so far, by
 * room_check's rehearsal. vns/vslab: the victims of the window last
 * looked at. Scratch of O(pages), built only when the pool is short.
 */
#define PG_FREE		KVD_NIL
#define PG_BUSY		(KVD_NIL - 1)

struct rmap {
	struct kvd_ns	*ns;
	struct kvd_pool	*pool;
	uint32_t	nr_ns;
	uint32_t	*pns, *pslab, *given;
	uint32_t	*vns, *vslab;
	uint32_t	*off;		/* [nr_ns]: namespace i's slabs in pend */
	uint32_t	*pend;		/* children elsewhere not yet taken */
};

/* An aligned run of slab_pages for ns: what making it free would cost. */
struct rwin {
	uint64_t	cost;		/* its victims' newest tick, 0: free */
	uint32_t	start;
	uint32_t	pages;		/* pages of the victim slabs */
	uint32_t	nv;		/* victim slabs, in m->vns/vslab */
};

static void rmap_exit(struct rmap *m)
{
	free(m->pns);
	free(m->pslab);
	free(m->given);
	free(m->vns);
	free(m->vslab);
	free(m->off);
	free(m->pend);
}

/* Slab @s of namespace @i becomes a victim candidate: its pages say so. */
static void rmap_add(struct rmap *m, uint32_t i, uint32_t s)
{
	const struct kvd_ns *o = &m->pool->ns[i];
	uint32_t f = o->slabs[s].first_page;

	for (uint32_t p = f; p < f + o->slab_pages; p++) {
		m->pns[p] = i;
		m->pslab[p] = s;
	}
}

static int rmap_init(struct rmap *m, struct kvd_ns *ns)
{
	struct kvd_pool *pool = ns->pool;
	uint32_t total = 0;

	memset(m, 0, sizeof(*m));
	m->ns = ns;
	m->pool = pool;
	m->nr_ns = pool->ns && pool->nr_live_ns > 1 ? pool->nr_ns : 0;
	m->pns = malloc(pool->nr_pages * sizeof(*m->pns));
	m->pslab = malloc(pool->nr_pages * sizeof(*m->pslab));
	m->given = calloc(m->nr_ns + 1, sizeof(*m->given));
	m->vns = malloc(ns->slab_pages * sizeof(*m->vns));
	m->vslab = malloc(ns->slab_pages * sizeof(*m->vslab));
	m->off = calloc(m->nr_ns + 1, sizeof(*m->off));
	for (uint32_t i = 0; m->off && i < m->nr_ns; i++) {
		m->off[i] = total;
		total += pool->ns[i].live ? pool->ns[i].slab_slots_used : 0;
	}
	m->pend = calloc(total + 1, sizeof(*m->pend));
	if (!m->pns || !m->pslab || !m->given || !m->vns || !m->vslab ||
	    !m->off || !m->pend) {
		rmap_exit(m);
		return -ENOMEM;
	}
	for (uint32_t p = 0; p < pool->nr_pages; p++)
		m->pns[p] = kvd_pool_page_used(pool, p) ? PG_BUSY : PG_FREE;
	for (uint32_t i = 0; i < m->nr_ns; i++) {
		const struct kvd_ns *o = &pool->ns[i];

		if (!o->live || o == ns || !ns_reclaimable(o, o->slab_pages))
			continue;
		for (uint32_t s = 0; s < o->slab_slots_used; s++) {
			const struct kvd_slab *sl = &o->slabs[s];

			if (slab_reclaimable(sl))
				rmap_add(m, i, s);
			else if (sl->live && !sl->nr_held)
				m->pend[m->off[i] + s] = sl->nr_out;
		}
	}
	return 0;
}

/* Pages namespace @i gives up: so far, plus the first @nv victims'. */
static uint64_t win_taken(const struct rmap *m, uint32_t nv, uint32_t i)
{
	uint64_t n = m->given[i];

	for (uint32_t v = 0; v < nv; v++)
		if (m->vns[v] == i)
			n += m->pool->ns[i].slab_pages;
	return n;
}

/* Do the victims leave every namespace and tenant at its min_pages? */
static bool win_mins(const struct rmap *m, uint32_t nv)
{
	for (uint32_t v = 0; v < nv; v++) {
		const struct kvd_ns *o = &m->pool->ns[m->vns[v]];
		uint64_t t = win_taken(m, nv, m->vns[v]);

		if (o->acct.pages < o->acct.min_pages + t)
			return false;
		t = 0;
		if (!o->tacct)
			continue;
		for (uint32_t j = 0; j < m->nr_ns; j++)
			if (m->pool->ns[j].live &&
			    m->pool->ns[j].tacct == o->tacct)
				t += win_taken(m, nv, j);
		if (o->tacct->pages < o->tacct->min_pages + t)
			return false;
	}
	return true;
}

/*
 * Would the run at @start be ours once the victims are gone? Each
 * extent it touches must be free, ours, or emptied by the victims
 * (kvd_pool_alloc_run_for's rule: no two tenants in one extent).
 */
static bool win_extents(const struct rmap *m, uint32_t start, uint32_t nv)
{
	const struct kvd_pool *pool = m->pool;
	uint32_t ep = pool->extent_pages, end = start + m->ns->slab_pages;

	if (!ep)
		return true;
	for (uint32_t e = start / ep; e <= (end - 1) / ep; e++) {
		uint64_t lo = (uint64_t)e * ep, hi = lo + ep, freed = 0;

		if (pool->ext_owner[e] == KVD_EXT_FREE ||
		    pool->ext_owner[e] == (int32_t)m->ns->tenant)
			continue;
		for (uint32_t v = 0; v < nv; v++) {
			const struct kvd_ns *o = &pool->ns[m->vns[v]];
			uint64_t f = o->slabs[m->vslab[v]].first_page;
			uint64_t l = f + o->slab_pages;

			f = f > lo ? f : lo;
			l = l < hi ? l : hi;
			freed += l > f ? l - f : 0;
		}
		if (freed < pool->ext_used[e])
			return false;
	}
	return true;
}

/* What making the run at @start free costs; false if it cannot be. */
static bool win_eval(struct rmap *m, uint32_t start, struct rwin *w)
{
	uint32_t nv = 0;

	*w = (struct rwin){ .start = start };
	for (uint32_t p = start; p < start + m->ns->slab_pages; p++) {
		uint32_t i = m->pns[p];
		const struct kvd_slab *sl;

		if (i == PG_FREE)
			continue;
		if (i == PG_BUSY)
			return false;
		/* a slab's pages are one run: a new victim starts here */
		if (nv && m->vns[nv - 1] == i &&
		    m->vslab[nv - 1] == m->pslab[p])
			continue;
		sl = &m->pool->ns[i].slabs[m->pslab[p]];
		m->vns[nv] = i;
		m->vslab[nv++] = m->pslab[p];
		w->pages += m->pool->ns[i].slab_pages;
		if (sl->tick > w->cost)
			w->cost = sl->tick;
	}
	w->nv = nv;
	return win_mins(m, nv) && win_extents(m, start, nv);
}

/*
 * The run to make free: the one whose victims' newest use is the
 * oldest (as evicting victim slabs coldest first would make it free
 * first), fewest victim pages on a tie; a free run (first fit, as
 * kvd_pool_alloc_run takes it) before all. Its victims end in m->vns.
 */
static bool win_best(struct rmap *m, struct rwin *best)
{
	uint32_t n = m->ns->slab_pages, align = m->ns->slab_align;
	bool found = false;
	struct rwin w;

	for (uint64_t s = 0; s + n <= m->pool->nr_pages; s += align) {
		if (!win_eval(m, (uint32_t)s, &w))
			continue;
		if (!found || w.cost < best->cost ||
		    (w.cost == best->cost && w.pages < best->pages)) {
			*best = w;
			found = true;
		}
		if (!w.cost)
			break;
	}
	if (found)
		win_eval(m, best->start, best);
	return found;
}

/*
 * Rehearsal: victim slab @s of namespace @i is gone, and with it its
 * blocks' links to parents in other slabs; a parent slab left with no
 * child elsewhere (and no held block) is a victim for later runs, as
 * ns_reclaim will find it after evicting @s.
 */
static void win_unlink(struct rmap *m, uint32_t i, uint32_t s)
{
	const struct kvd_ns *o = &m->pool->ns[i];
	const struct kvd_slab *sl = &o->slabs[s];

	for (uint32_t k = 0; k < sl->nr_carved; k++) {
		const struct kvd_block *b = &o->blocks[sl->first_block + k];
		uint32_t ps, *c;

		if (!b->committed || b->parent == KVD_NIL)
			continue;
		ps = o->blocks[b->parent].slab;
		c = &m->pend[m->off[i] + ps];
		if (ps != s && *c && --*c == 0)
			rmap_add(m, i, ps);
	}
}

/* Rehearsal: the run and its victims' slabs are gone for later runs. */
static void win_take(struct rmap *m, const struct rwin *w)
{
	for (uint32_t v = 0; v < w->nv; v++) {
		const struct kvd_ns *o = &m->pool->ns[m->vns[v]];
		uint32_t f = o->slabs[m->vslab[v]].first_page;

		for (uint32_t p = f; p < f + o->slab_pages; p++)
			m->pns[p] = PG_BUSY;
		m->given[m->vns[v]] += o->slab_pages;
		win_unlink(m, m->vns[v], m->vslab[v]);
	}
	for (uint32_t p = w->start; p < w->start + m->ns->slab_pages; p++)
		m->pns[p] = PG_BUSY;
}

/*
 * Slab @s of @o holds, alone, an aligned run for a slab of @ns in
 * extents @ns's tenant may take once it is gone.
 */
static bool slab_fits(const struct kvd_ns *ns, const struct kvd_ns *o,
		      uint32_t s)
{
	const struct kvd_pool *pool = ns->pool;
	uint64_t a, f, l, ep = pool->extent_pages;

	f = o->slabs[s].first_page;
	l = f + o->slab_pages;
	a = (f + ns->slab_align - 1) / ns->slab_align * ns->slab_align;
	if (a + ns->slab_pages > l)
		return false;
	/* its extents: free, ours, or holding nothing but this slab */
	for (uint64_t e = a / (ep ? ep : 1); ep &&
	     e <= (a + ns->slab_pages - 1) / ep; e++) {
		uint64_t lo = e * ep > f ? e * ep : f;
		uint64_t hi = (e + 1) * ep < l ? (e + 1) * ep : l;

		if (pool->ext_owner[e] != KVD_EXT_FREE &&
		    pool->ext_owner[e] != (int32_t)ns->tenant &&
		    pool->ext_used[e] > hi - lo)
			return false;
	}
	return true;
}

/*
 * The common case without the map: the coldest reclaimable slab that
 * another namespace may give holds, alone, an aligned run for a slab
 * of @ns in extents @ns's tenant may take once it is gone. No run can
 * cost less (win_best would choose it too, but for ties). Returns true
 * with *@oi, *@os set; false when it does not hold one (or none is).
 */
static bool coldest_slab_fits(struct kvd_ns *ns, uint32_t *oi, uint32_t *os)
{
	const struct kvd_pool *pool = ns->pool;
	uint64_t best = UINT64_MAX;
	const struct kvd_ns *o;

	for (uint32_t i = 0; i < pool->nr_ns; i++) {
		o = &pool->ns[i];
		if (!o->live || o == ns || !ns_reclaimable(o, o->slab_pages))
			continue;
		for (uint32_t s = 0; s < o->slab_slots_used; s++)
			if (slab_reclaimable(&o->slabs[s]) &&
			    o->slabs[s].tick < best) {
				best = o->slabs[s].tick;
				*oi = i;
				*os = s;
			}
	}
	return best != UINT64_MAX && slab_fits(ns, &pool->ns[*oi], *os);
}

/* Can @ns make one more slab at all (a free slot)? */
static bool slab_slot_left(const struct kvd_ns *ns)
{
	return ns->free_slab != KVD_NIL || ns->slab_slots_used < ns->max_slabs;
}

/*
 * The committed blocks of slab @s of @o (none held) and those that
 * descend from one of them, in any slab, marked 1 in @st (2: not;
 * [max_blocks], zeroed), each found by walking up its parents once (a
 * second walk writes the answer along the path). True when none of
 * them is held, so that they can all go.
 */
static bool below_slab(const struct kvd_ns *o, uint32_t s, uint8_t *st)
{
	for (uint32_t id = 0; id < o->max_blocks; id++)
		if (o->blocks[id].committed && o->blocks[id].slab == s)
			st[id] = 1;
	for (uint32_t id = 0; id < o->max_blocks; id++) {
		const struct kvd_block *b = &o->blocks[id];
		uint32_t p;
		uint8_t v;

		if (st[id] || !b->committed)
			continue;
		for (p = b->parent; p != KVD_NIL && !st[p];
		     p = o->blocks[p].parent)
			;
		v = p == KVD_NIL ? 2 : st[p];
		for (uint32_t q = id; q != p; q = o->blocks[q].parent)
			st[q] = v;
		if (v == 1 && b->state == KVD_BLOCK_HELD)
			return false;
	}
	for (uint32_t id = 0; id < o->max_blocks; id++)
		if (st[id] == 1 && o->blocks[id].state == KVD_BLOCK_HELD)
			return false;
	return true;
}

/*
 * Pages of @o's slabs that evicting what below_slab marked would empty
 * (every block in use in them marked): what @o would give, to be held
 * against its and its tenant's min_pages.
 */
static uint32_t below_pages(const struct kvd_ns *o, const uint8_t *st)
{
	uint32_t pages = 0;

	for (uint32_t k = 0; k < o->slab_slots_used; k++) {
		const struct kvd_slab *sl = &o->slabs[k];
		uint32_t used = sl->nr_blocks - sl->nr_free, n = 0;

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++)
			n += st[sl->first_block + i] == 1;
		if (sl->live && used && n == used)
			pages += o->slab_pages;
	}
	return pages;
}

/* Evict the blocks below_slab marked, leaf first, as slab_evict does:
 * the last of slab @s gives its pages back. */
static uint32_t evict_below(struct kvd_ns *o, uint8_t *st)
{
	uint32_t n = 0;

	for (uint32_t id = 0; id < o->max_blocks; id++) {
		uint32_t q = id;

		while (q != KVD_NIL && st[q] == 1 &&
		       o->blocks[q].state == KVD_BLOCK_CACHED &&
		       !o->blocks[q].nr_children) {
			uint32_t p = o->blocks[q].parent;

			st[q] = 0;
			kvd_prefix_evict_leaf(o, q);
			kvd_evicted(o, q);
			kvd_slab_free_block(o, q);
			n++;
			q = p;
		}
	}
	return n;
}

/*
 * No slab of another namespace could go whole: a slab none of whose
 * blocks is held can still be kept by chains of cached blocks hanging
 * from it into other slabs (slab_reclaimable's second rule), and those
 * slabs kept by a held (or pinned) block of theirs. Take the coldest
 * such slab that fits a slab of @ns and whose descendants elsewhere are
 * all cached: they go with it, leaf first. Nothing is evicted unless
 * the slab then goes. Rare, and O(blocks of that namespace).
 * Returns the pages freed.
 */
static uint32_t unstrand(struct kvd_ns *ns)
{
	struct kvd_pool *pool = ns->pool;
	uint32_t before = pool->pages_used, s = KVD_NIL;
	uint64_t best = UINT64_MAX;
	struct kvd_ns *o = NULL;
	uint8_t *st;

	for (uint32_t i = 0; i < pool->nr_ns; i++) {
		struct kvd_ns *c = &pool->ns[i];

		if (!c->live || c == ns || !ns_reclaimable(c, c->slab_pages))
			continue;
		for (uint32_t k = 0; k < c->slab_slots_used; k++) {
			const struct kvd_slab *sl = &c->slabs[k];

			if (sl->live && !sl->nr_held && sl->nr_out &&
			    sl->tick < best && slab_fits(ns, c, k)) {
				best = sl->tick;
				o = c;
				s = k;
			}
		}
	}
	if (!o)
		return 0;
	st = calloc(o->max_blocks, 1);
	if (!st)
		return 0;
	/* all of them must go, and the slabs they empty leave @o its mins */
	if (below_slab(o, s, st) && ns_reclaimable(o, below_pages(o, st))) {
		pool->reclaims += evict_below(o, st);
		kvd_warn_on_once(o->slabs[s].live);	/* all of it went */
	}
	free(st);
	return before - pool->pages_used;
}

/*
 * kvd_ns_reclaim - the pool has no run of pages for a slab of @ns: free one
 * by evicting whole slabs of other namespaces (DESIGN.md elastic
 * sharing). Only reclaimable slabs (slab_reclaimable) of namespaces that
 * stay at or above their and their tenant's guaranteed minimum are
 * victims, and only the slabs that overlap the chosen run are evicted,
 * so every block evicted here frees a page @ns gets. The run is the one
 * whose victims were used least recently (win_best); when this
 * namespace's own least recently used leaf is older still, nothing is
 * reclaimed and @ns evicts that leaf instead. When no run can be freed
 * and @ns has no leaf to evict, the coldest leaves of another namespace
 * go until one of its slabs empties (unstrand). Returns the pages freed,
 * 0 if none.
 */
int kvd_ns_reclaim(struct kvd_ns *ns)
{
	struct kvd_pool *pool = ns->pool;
	uint32_t before = pool->pages_used, first, vi, vs;
	struct rwin w;
	struct rmap m;

	/* the only namespace: nothing to scan, it evicts its own leaf */
	if (pool->nr_live_ns <= 1 || !pool->ns || !slab_slot_left(ns))
		return 0;
	first = kvd_prefix_lru_first(ns);
	if (coldest_slab_fits(ns, &vi, &vs)) {
		if (first == KVD_NIL ||
		    ns->blocks[first].tick > pool->ns[vi].slabs[vs].tick)
			pool->reclaims += slab_evict(&pool->ns[vi], vs);
		return (int)(before - pool->pages_used);
	}
	if (rmap_init(&m, ns))
		return 0;
	if (!win_best(&m, &w) || !w.nv) {
		if (first == KVD_NIL)	/* nothing of ours to evict instead */
			unstrand(ns);
		goto out;
	}
	if (first != KVD_NIL && ns->blocks[first].tick < w.cost)
		goto out;
	for (uint32_t v = 0; v < w.nv; v++)
		pool->reclaims += slab_evict(&pool->ns[m.vns[v]], m.vslab[v]);
out:
	rmap_exit(&m);
	return (int)(before - pool->pages_used);
}

/* Admin: drop every ref-0 cached block (leaf first); returns how many. */
uint32_t kvd_ns_evict_all(struct kvd_ns *ns)
{
	uint32_t n = 0, id;

	while (!kvd_prefix_evict_one(ns, &id)) {
		kvd_evicted(ns, id);
		kvd_slab_free_block(ns, id);
		n++;
	}
	return n;
}

/* How many of @pages new pages @a's max_pages leaves room for. */
static uint64_t quota_left(const struct kvd_acct *a, uint64_t pages)
{
	if (!a || !a->max_pages)
		return pages;
	if (a->pages >= a->max_pages)
		return 0;
	return pages < a->max_pages - a->pages ? pages :
	       a->max_pages - a->pages;
}

/* Blocks a slab of @ns starting at @page holds (kvd_slab_new's count). */
static uint32_t slab_blocks_at(const struct kvd_ns *ns, uint64_t page)
{
	uint64_t start = page * KV_PAGE_BYTES, end = start + ns->slab_bytes;

	return (uint32_t)(end / ns->block_bytes -
			  (start + ns->block_bytes - 1) / ns->block_bytes);
}

/* The fewest blocks a new slab of @ns holds, wherever it starts. */
static uint64_t slab_blocks_min(const struct kvd_ns *ns)
{
	uint64_t n = ns->slab_bytes / ns->block_bytes;

	/* plain-page slabs lose a block to their two partial ends */
	if (ns->slab_bytes % ns->block_bytes && n > 1)
		n--;
	return n;
}

/*
 * Blocks that new slabs in free pages alone give @ns, up to @nr, at most
 * @max slabs: first fit, as kvd_slab_new takes them, in extents that are
 * free or ours. A lower bound, without scratch memory: the common path.
 */
static uint64_t free_run_blocks(const struct kvd_ns *ns, uint64_t nr,
				uint64_t max)
{
	const struct kvd_pool *pool = ns->pool;
	uint32_t n = ns->slab_pages, align = ns->slab_align;
	uint64_t got = 0, k = 0, s = 0;

	if (pool->pages_used + (uint64_t)n > pool->nr_pages)
		return 0;	/* full: no scan, as kvd_pool_alloc_run_for */
	while (s + n <= pool->nr_pages && got < nr && k < max) {
		uint64_t busy = UINT64_MAX, ep = pool->extent_pages;

		for (uint64_t p = s + n; p-- > s;)
			if (kvd_pool_page_used(pool, (uint32_t)p)) {
				busy = p;
				break;
			}
		for (uint64_t e = s / (ep ? ep : 1);
		     busy == UINT64_MAX && ep && e <= (s + n - 1) / ep; e++)
			if (pool->ext_owner[e] != KVD_EXT_FREE &&
			    pool->ext_owner[e] != (int32_t)ns->tenant)
				busy = s;
		if (busy != UINT64_MAX) {
			s = (busy + align) / align * align;
			continue;
		}
		got += slab_blocks_at(ns, s);
		k++;
		s = (s + n + align - 1) / align * align;
	}
	return got;
}

/*
 * Mark (@set) or unmark the cached ancestors of every held committed
 * block of @ns; returns how many changed.
 */
static uint32_t mark_stuck(struct kvd_ns *ns, bool set)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			const struct kvd_block *b;
			uint32_t p;

			b = &ns->blocks[sl->first_block + i];
			p = b->parent;
			if (b->state != KVD_BLOCK_HELD || !b->committed)
				continue;
			for (; p != KVD_NIL; p = ns->blocks[p].parent) {
				struct kvd_block *pb = &ns->blocks[p];

				if (pb->state != KVD_BLOCK_CACHED ||
				    pb->mark == set)
					break;
				pb->mark = set;
				n++;
			}
		}
	}
	return n;
}

/*
 * Cached blocks of @ns that its own eviction can reach: all but the
 * cached ancestors of held blocks (leaf first: they go only after the
 * held child). Uses the blocks' mark as scratch (no cached block is
 * marked otherwise). O(blocks in slabs): off the common path.
 */
static uint32_t own_evictable(struct kvd_ns *ns)
{
	uint32_t stuck = mark_stuck(ns, true);

	mark_stuck(ns, false);
	return ns->cached_blocks - stuck;
}

/*
 * Would @nr blocks need more than the @quota slabs the max_pages leave,
 * with @have blocks at hand, even were the pool all free? The quota is
 * checked before the pool, as kvd_slab_new does: -EDQUOT then.
 */
static bool quota_short(const struct kvd_ns *ns, uint64_t have,
			uint64_t quota, uint32_t nr)
{
	uint64_t per = (ns->slab_bytes + ns->block_bytes - 1) / ns->block_bytes;

	return have + quota * per < nr;
}

/*
 * room_check - can @nr more blocks be had, before anything is evicted?
 * Free blocks in our slabs, our cached leaves, new slabs in free runs of
 * pages, or one slab from ns_reclaim at most; if those fall short, a
 * rehearsal of what block_alloc would do: our own evictable cached
 * blocks, and the runs ns_reclaim would free one after the other
 * (win_best over a scratch map; victims' pages and the mins counted as
 * they go). New slabs stop at the namespace's and the tenant's
 * max_pages. 0, else -EDQUOT when the quota stands in the way
 * (quota_short, or pages enough but past it), else -ENOSPC; -ENOMEM
 * when no scratch map can be had. So a request that cannot succeed
 * evicts nothing of others (and its own evictions are undone). The
 * rehearsal errs on the side of refusing where runs and victims
 * straddle (a victim slab's pages outside its run are not counted).
 */
int kvd_ns_room_check(struct kvd_ns *ns, uint32_t nr)
{
	uint64_t have = (uint64_t)ns->nr_blocks - ns->blocks_used -
			ns->cached_blocks;
	uint64_t quota, q, got, all, k = 0;
	struct rwin w;
	struct rmap m;

	if (have >= nr)
		return 0;
	/* new slabs stop at the namespace's and the tenant's max_pages */
	quota = quota_left(ns->tacct, quota_left(&ns->acct, UINT64_MAX));
	quota /= ns->slab_pages;
	q = quota < ns->max_slabs ? quota : ns->max_slabs;	/* max_pages */
	if (quota > ns->max_slabs - ns->nr_slabs)
		quota = ns->max_slabs - ns->nr_slabs;
	/* The cheap bounds first: our leaves now on the LRU are evictable. */
	if (have + ns->lru_len >= nr ||
	    have + ns->lru_len + free_run_blocks(ns, nr - have, quota) >= nr)
		return 0;
	/*
	 * One more slab at most: ns_reclaim evicts only for a slab it
	 * hands us, and with it the request is served (our leaves make up
	 * the rest); without one it evicts nothing of others. No rehearsal.
	 */
	if (quota && nr - have - ns->lru_len <= slab_blocks_min(ns))
		return 0;
	/* Alone on the pool: only our own evictions, undone on failure. */
	if (ns->pool->nr_live_ns <= 1 || !ns->pool->ns) {
		have += ns->cached_blocks;
		if (have >= nr ||
		    have + free_run_blocks(ns, nr - have, quota) >= nr)
			return 0;
		return quota_short(ns, have, q, nr) ||
		       have + free_run_blocks(ns, nr - have, UINT64_MAX) >= nr ?
		       -EDQUOT : -ENOSPC;
	}
	/* past max_pages however free the pool: no map needed to say so */
	if (quota_short(ns, have + ns->cached_blocks, q, nr))
		return -EDQUOT;
	if (rmap_init(&m, ns))
		return -ENOMEM;
	have += own_evictable(ns);
	got = all = have;
	while (all < nr && win_best(&m, &w)) {
		uint32_t b = slab_blocks_at(ns, w.start);

		win_take(&m, &w);
		all += b;
		if (k++ < quota)
			got += b;
	}
	rmap_exit(&m);
	if (got >= nr)
		return 0;
	return all >= nr || quota_short(ns, have, q, nr) ? -EDQUOT :
	       -ENOSPC;
}
