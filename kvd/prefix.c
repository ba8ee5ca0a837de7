// SPDX-License-Identifier: MIT
/*
 * The prefix cache of a namespace: committed blocks indexed by their
 * block hash, ref-0 ones kept on an LRU for eviction.
 *
 * Keys. A client's block hash is mixed with the namespace's tenant secret
 * (XXH3-128 with the secret as seed) before it is used as a key, so two
 * tenants never hit each other's blocks, even for equal prompts; and the
 * index is per namespace, so a block committed under one model id or
 * geometry is never hit under another.
 *
 * Eviction is LRU among ref-0 committed blocks, leaf first: a block with
 * committed children is not on the LRU, so no cached block ever becomes
 * unreachable through the index. When the last child of a ref-0 parent is
 * evicted, the parent joins the LRU at its head: every lookup that touched
 * the child touched the parent first, so it is at least as old as any
 * block on the list. Everything here is O(1) per block.
 *
 * A hit takes its ref in the same step as the lookup (the daemon is one
 * thread), so there is no window in which a hit block can be evicted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ns.h"

int kvd_prefix_init(struct kvd_ns *ns)
{
	uint64_t nb = 1;

	while (nb < ns->max_blocks)
		nb <<= 1;
	ns->index = calloc(nb, sizeof(*ns->index));	/* untouched until used */
	if (!ns->index)
		return -ENOMEM;
	ns->index_mask = (uint32_t)(nb - 1);
	ns->lru_head = ns->lru_tail = KVD_NIL;
	return 0;
}

void kvd_prefix_exit(struct kvd_ns *ns)
{
	free(ns->index);
	ns->index = NULL;
}

static struct kv_hash key_of(const struct kvd_ns *ns, const struct kv_hash *h)
{
	XXH128_hash_t x = XXH3_128bits_withSeed(h->b, sizeof(h->b), ns->seed);
	struct kv_hash k;

	XXH128_canonicalFromHash((XXH128_canonical_t *)k.b, x);
	return k;
}

static bool is_root(const struct kv_hash *h)
{
	static const struct kv_hash zero;

	return !memcmp(h, &zero, sizeof(*h));
}

static uint32_t *bucket(struct kvd_ns *ns, const struct kv_hash *key)
{
	uint32_t b;

	memcpy(&b, key->b, sizeof(b));	/* keys are uniformly random */
	return &ns->index[b & ns->index_mask];
}

static uint32_t index_find(struct kvd_ns *ns, const struct kv_hash *key)
{
	uint32_t i = *bucket(ns, key);

	while (i) {
		if (!memcmp(&ns->blocks[i - 1].key, key, sizeof(*key)))
			return i - 1;
		i = ns->blocks[i - 1].hnext;
	}
	return KVD_NIL;
}

static void index_add(struct kvd_ns *ns, uint32_t id)
{
	uint32_t *b = bucket(ns, &ns->blocks[id].key);

	ns->blocks[id].hnext = *b;
	*b = id + 1;
}

static void index_del(struct kvd_ns *ns, uint32_t id)
{
	uint32_t *pp = bucket(ns, &ns->blocks[id].key);

	while (*pp != id + 1)
		pp = &ns->blocks[*pp - 1].hnext;
	*pp = ns->blocks[id].hnext;
}

/* ---- LRU: head is the least recently used ---- */

static void lru_add(struct kvd_ns *ns, uint32_t id, bool at_head)
{
	struct kvd_block *b = &ns->blocks[id];

	if (at_head) {
		b->lru_prev = KVD_NIL;
		b->lru_next = ns->lru_head;
		if (ns->lru_head != KVD_NIL)
			ns->blocks[ns->lru_head].lru_prev = id;
		else
			ns->lru_tail = id;
		ns->lru_head = id;
	} else {
		b->lru_next = KVD_NIL;
		b->lru_prev = ns->lru_tail;
		if (ns->lru_tail != KVD_NIL)
			ns->blocks[ns->lru_tail].lru_next = id;
		else
			ns->lru_head = id;
		ns->lru_tail = id;
	}
	b->on_lru = true;
	ns->lru_len++;
}

static void lru_del(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (!b->on_lru)
		return;
	if (b->lru_prev != KVD_NIL)
		ns->blocks[b->lru_prev].lru_next = b->lru_next;
	else
		ns->lru_head = b->lru_next;
	if (b->lru_next != KVD_NIL)
		ns->blocks[b->lru_next].lru_prev = b->lru_prev;
	else
		ns->lru_tail = b->lru_prev;
	b->on_lru = false;
	ns->lru_len--;
}

/* A committed block's last ref went: it stays, cached, at the MRU end. */
void kvd_prefix_cache(struct kvd_ns *ns, uint32_t id)
{
	ns->pool->frees++;	/* evictable now: a waiting ALLOC may use it */
	struct kvd_block *b = &ns->blocks[id];

	b->state = KVD_BLOCK_CACHED;
	b->tick = ++ns->pool->clock;
	ns->cached_blocks++;
	if (!b->nr_children)
		lru_add(ns, id, false);
}

/* A cached block gets a ref again: off the LRU, out of the cache count. */
void kvd_prefix_uncache(struct kvd_ns *ns, uint32_t id)
{
	lru_del(ns, id);
	ns->cached_blocks--;
}

/* Drop @id (a cached leaf) from the cache; the caller reuses or frees it. */
static void evict(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t p = b->parent;

	lru_del(ns, id);
	index_del(ns, id);
	b->committed = false;
	b->parent = KVD_NIL;
	ns->committed_blocks--;
	ns->cached_blocks--;
	ns->evictions++;
	if (p == KVD_NIL)
		return;
	/* The parent may now be a leaf; it is older than anything listed. */
	if (--ns->blocks[p].nr_children == 0 && ns->blocks[p].ref == 0)
		lru_add(ns, p, true);
}

/* Evict the LRU leaf for reuse: 0 and its id, or -ENOSPC if none. */
int kvd_prefix_evict_one(struct kvd_ns *ns, uint32_t *id)
{
	if (ns->lru_head == KVD_NIL)
		return -ENOSPC;
	*id = ns->lru_head;
	evict(ns, *id);
	return 0;
}

/*
 * kvd_prefix_reclaim - the pool has no pages for a slab of @ns: take them
 * from the namespace whose least recently used cached leaf is the oldest
 * (DESIGN.md elastic sharing), as long as that keeps it and its tenant at
 * or above their guaranteed minimum. Its cached blocks are evicted in LRU
 * order until one of its slabs is wholly free and goes back to the pool.
 * Returns the pages freed; 0 when the coldest is @ns itself (it evicts its
 * own leaf and reuses it) or nothing may be reclaimed.
 */
int kvd_prefix_reclaim(struct kvd_ns *ns)
{
	struct kvd_pool *pool = ns->pool;
	struct kvd_ns *victim = NULL;
	uint64_t coldest = UINT64_MAX;
	uint32_t before = pool->pages_used, id;

	/* the only namespace: nothing to scan, it evicts its own leaf */
	if (pool->nr_live_ns <= 1)
		return 0;
	if (ns->lru_head != KVD_NIL)
		coldest = ns->blocks[ns->lru_head].tick;
	for (uint32_t i = 0; pool->ns && i < pool->nr_ns; i++) {
		struct kvd_ns *o = &pool->ns[i];

		if (!o->live || o == ns || o->lru_head == KVD_NIL ||
		    !kvd_ns_reclaimable(o, o->slab_pages))
			continue;
		if (o->blocks[o->lru_head].tick < coldest) {
			coldest = o->blocks[o->lru_head].tick;
			victim = o;
		}
	}
	if (!victim)
		return 0;
	while (pool->pages_used == before &&
	       kvd_ns_reclaimable(victim, victim->slab_pages) &&
	       !kvd_prefix_evict_one(victim, &id)) {
		__kvd_block_free(victim, id);
		pool->reclaims++;
	}
	return (int)(before - pool->pages_used);
}

/* Admin: drop every ref-0 cached block (leaf first); returns how many. */
uint32_t kvd_prefix_evict_all(struct kvd_ns *ns)
{
	uint32_t n = 0, id;

	while (!kvd_prefix_evict_one(ns, &id)) {
		__kvd_block_free(ns, id);
		n++;
	}
	return n;
}

/*
 * The keys of the next @n (<= LOOKUP_AHEAD) hashes, with their buckets
 * and first blocks prefetched: a prefix's blocks sit at random places in
 * the index, so one at a time each lookup waits on two cache misses.
 */
#define LOOKUP_AHEAD	8

static void lookup_ahead(struct kvd_ns *ns, const struct kv_hash *hashes,
			 struct kv_hash *key, uint32_t n)
{
	uint32_t *b[LOOKUP_AHEAD];

	for (uint32_t j = 0; j < n; j++) {
		key[j] = key_of(ns, &hashes[j]);
		b[j] = bucket(ns, &key[j]);
		__builtin_prefetch(b[j]);
	}
	for (uint32_t j = 0; j < n; j++)
		if (*b[j])
			__builtin_prefetch(&ns->blocks[*b[j] - 1]);
}

/*
 * kvd_prefix_lookup - the longest committed prefix of @hashes: stops at
 * the first miss. Each hit gets a ref for @hr at once. Returns the hit
 * count h (ids in @ids[0..h)), or -ENOMEM when the hold table is full
 * (nothing taken).
 */
int kvd_prefix_lookup(struct kvd_ns *ns, struct kvd_holder *hr,
		      const struct kv_hash *hashes, uint32_t nr, uint32_t *ids)
{
	struct kv_hash key[LOOKUP_AHEAD];
	uint32_t h;

	if (ns->holds.cap - ns->holds.nr < nr)
		return -ENOMEM;
	ns->lookups++;
	for (h = 0; h < nr; h++) {
		uint32_t id, j = h % LOOKUP_AHEAD;

		/* Keys and buckets a chunk ahead: their misses overlap. */
		if (!j)
			lookup_ahead(ns, hashes + h, key,
				     nr - h < LOOKUP_AHEAD ? nr - h :
				     LOOKUP_AHEAD);
		id = index_find(ns, &key[j]);
		/* a miss, the client's limit, or a block at KVD_REF_MAX */
		if (id == KVD_NIL || !kvd_holder_room(hr, 1) ||
		    __kvd_hold_get(ns, hr, id))
			break;
		ids[h] = id;
	}
	ns->hit_blocks += h;
	return (int)h;
}

/*
 * kvd_prefix_alloc - lookup of @n_hashes hashes, then new blocks for the
 * rest of @nr ids. All or nothing: on error the hits are given back.
 */
int kvd_prefix_alloc(struct kvd_ns *ns, struct kvd_holder *hr,
		     const struct kv_hash *hashes, uint32_t n_hashes,
		     uint32_t *ids, uint32_t nr)
{
	int h, ret;

	if (n_hashes > nr)
		return -EINVAL;
	ret = kvd_ns_alloc_check(ns, hr, nr);
	if (ret)
		return ret;
	h = kvd_prefix_lookup(ns, hr, hashes, n_hashes, ids);
	if (h < 0 || (uint32_t)h == nr)
		return h;
	ret = __kvd_ns_alloc_ids(ns, hr, ids + h, nr - (uint32_t)h);
	if (ret >= 0)
		return h;
	while (h--)
		__kvd_hold_put(ns, hr, ids[h]);
	return ret;
}

static int commit_check(struct kvd_ns *ns, struct kvd_holder *hr,
			const struct kv_commit *e, uint32_t nr)
{
	uint32_t i;
	int ret = 0;

	for (i = 0; i < nr && !ret; i++) {
		uint32_t id = e[i].id;

		if (id >= ns->max_blocks || e[i].flags)
			ret = -EINVAL;
		else if (!kvd_ns_hold_count(ns, hr->slot, id))
			ret = -EPERM;
		else if (ns->blocks[id].committed)
			ret = -EEXIST;
		else if (ns->blocks[id].mark)
			ret = -EINVAL;	/* the same block twice */
		else
			ns->blocks[id].mark = true;
	}
	while (i--)
		if (e[i].id < ns->max_blocks)
			ns->blocks[e[i].id].mark = false;
	return ret;
}

/* Publish @id under @key, linked to its parent if that is committed. */
static void commit_one(struct kvd_ns *ns, uint32_t id,
		       const struct kv_hash *key, const struct kv_hash *parent)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t p = KVD_NIL;

	b->key = *key;
	b->committed = true;
	b->parent = KVD_NIL;
	index_add(ns, id);
	ns->committed_blocks++;
	if (!is_root(parent)) {
		struct kv_hash pkey = key_of(ns, parent);

		p = index_find(ns, &pkey);
	}
	if (p == KVD_NIL || p == id)
		return;
	b->parent = p;
	if (ns->blocks[p].nr_children++ == 0)
		lru_del(ns, p);	/* no longer a leaf */
}

/*
 * kvd_prefix_commit - publish each block of @e (a private copy) under its
 * hash. All entries are checked first: -EINVAL (id out of range, flags,
 * the same id twice), -EPERM (not held by @hr), -EEXIST (already
 * committed) or -ENOMEM (hold table full); then nothing changes. A hash
 * already in the index is a
 * duplicate: @hr's block is released, a ref on the cached block taken
 * instead, and the entry's id replaced (flags KV_COMMIT_DEDUP).
 */
int kvd_prefix_commit(struct kvd_ns *ns, struct kvd_holder *hr,
		      struct kv_commit *e, uint32_t nr)
{
	int ret;

	/* Each dedup may take a hold before it drops one: room for all. */
	if (ns->holds.cap - ns->holds.nr < nr)
		return -ENOMEM;
	ret = commit_check(ns, hr, e, nr);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < nr; i++) {
		struct kv_hash key = key_of(ns, &e[i].hash);
		uint32_t have = index_find(ns, &key);

		if (have == KVD_NIL) {
			commit_one(ns, e[i].id, &key, &e[i].parent);
			continue;
		}
		/* Take the cached block first: the hold table has room for
		 * the swap, as ours is dropped right after. */
		/* Room was checked above; only KVD_REF_MAX can refuse: the
		 * block then stays the caller's, uncommitted (flags 0). */
		if (__kvd_hold_get(ns, hr, have))
			continue;
		__kvd_hold_put(ns, hr, e[i].id);
		e[i].id = have;
		e[i].flags = KV_COMMIT_DEDUP;
	}
	return (int)nr;
}

/*
 * kvd_prefix_tree - the committed blocks of @ns as a forest, depth first,
 * roots first, at most @max nodes down to @depth (0 = roots only). For
 * kvctl: O(blocks in slabs), with temporary child lists. Returns the
 * number of nodes written, or -ENOMEM.
 */
int kvd_prefix_tree(struct kvd_ns *ns, struct kv_admin_tree_node *out,
		    uint32_t max, uint32_t depth)
{
	uint32_t *first = NULL, *next = NULL, *sub = NULL, *stack = NULL;
	uint32_t *roots = NULL, nroots = 0, n = 0, sp;
	int ret = -ENOMEM;

	first = malloc((size_t)ns->max_blocks * sizeof(*first));
	next = malloc((size_t)ns->max_blocks * sizeof(*next));
	sub = malloc((size_t)ns->max_blocks * sizeof(*sub));
	stack = malloc(((size_t)ns->committed_blocks + 1) * 4 * sizeof(*stack));
	roots = malloc(((size_t)ns->committed_blocks + 1) * sizeof(*roots));
	if (!first || !next || !sub || !stack || !roots)
		goto out;
	/* Child lists, from every committed block in a live slab. */
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;

			first[id] = KVD_NIL;
			sub[id] = 1;
		}
	}
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i, p;

			if (!ns->blocks[id].committed)
				continue;
			p = ns->blocks[id].parent;
			if (p == KVD_NIL) {
				roots[nroots++] = id;
				continue;
			}
			next[id] = first[p];
			first[p] = id;
		}
	}
	/* Subtree sizes: post-order over an explicit stack. */
	for (uint32_t r = 0; r < nroots; r++) {
		sp = 0;
		stack[sp++] = roots[r];
		stack[sp++] = 0;
		while (sp) {
			uint32_t done = stack[--sp], id = stack[--sp];

			if (done) {
				if (ns->blocks[id].parent != KVD_NIL)
					sub[ns->blocks[id].parent] += sub[id];
				continue;
			}
			stack[sp++] = id;
			stack[sp++] = 1;
			for (uint32_t ch = first[id]; ch != KVD_NIL; ch = next[ch]) {
				stack[sp++] = ch;
				stack[sp++] = 0;
			}
		}
	}
	/* Emit: pre-order, depth-limited; stack holds (id, depth). */
	for (uint32_t r = 0; r < nroots && n < max; r++) {
		sp = 0;
		stack[sp++] = roots[r];
		stack[sp++] = 0;
		while (sp && n < max) {
			uint32_t dep = stack[--sp], id = stack[--sp];
			const struct kvd_block *b = &ns->blocks[id];

			out[n++] = (struct kv_admin_tree_node){
				.id = id, .parent = b->parent, .depth = dep,
				.ref = b->ref, .children = b->nr_children,
				.subtree = sub[id], .hash = b->key,
			};
			if (dep >= depth)
				continue;
			for (uint32_t ch = first[id]; ch != KVD_NIL; ch = next[ch]) {
				stack[sp++] = ch;
				stack[sp++] = dep + 1;
			}
		}
	}
	ret = (int)n;
out:
	free(first);
	free(next);
	free(sub);
	free(stack);
	free(roots);
	return ret;
}

/*
 * kvd_ns_check - verify the books of @ns (tests, and kvd's invariant
 * mode): every block is exactly one of free / held / cached; ref counts
 * equal the holds recorded; counters, LRU, index and child counts agree.
 * Returns 0, or -EUCLEAN with *why naming the first broken rule.
 * O(blocks in slabs + holds).
 */
int kvd_ns_check(struct kvd_ns *ns, const char **why)
{
	uint32_t used = 0, cached = 0, committed = 0, on_lru = 0, n = 0;
	uint32_t owned = 0;
	uint32_t *refs = calloc(ns->max_blocks, sizeof(*refs));
	uint32_t *kids = calloc(ns->max_blocks, sizeof(*kids));
	int ret = -EUCLEAN;

#define FAIL(msg) do { *why = (msg); goto out; } while (0)
	if (!refs || !kids) {
		*why = "out of memory";
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < ns->holds.used; i++) {
		const struct kvd_hold *h = &ns->holds.nodes[i];

		if (h->count && __kvd_hold_live(ns, i))
			refs[h->block] += h->count;
	}

	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];
		uint32_t nfree = sl->nr_blocks - sl->nr_carved;

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;
			const struct kvd_block *b = &ns->blocks[id];

			if (b->owner && (b->state != KVD_BLOCK_HELD ||
					 !b->own_refs))
				FAIL("a block has an owner but no ref of it");
			if (b->owner)
				refs[id] += b->own_refs;
			owned += !!b->owner;
			if (b->ref != refs[id])
				FAIL("a block's ref differs from its holds");
			if ((b->state == KVD_BLOCK_HELD) != (b->ref > 0))
				FAIL("held state and ref disagree");
			if (b->state == KVD_BLOCK_CACHED && !b->committed)
				FAIL("a cached block is not committed");
			if (b->state == KVD_BLOCK_FREE && b->committed)
				FAIL("a free block is committed");
			if (b->on_lru != (b->state == KVD_BLOCK_CACHED &&
					  !b->nr_children))
				FAIL("LRU membership is not 'cached leaf'");
			if (b->committed && index_find(ns, &b->key) != id)
				FAIL("a committed block is not in the index");
			if (b->committed && b->parent != KVD_NIL)
				kids[b->parent]++;
			used += b->state == KVD_BLOCK_HELD;
			cached += b->state == KVD_BLOCK_CACHED;
			committed += b->committed;
			on_lru += b->on_lru;
			nfree += b->state == KVD_BLOCK_FREE;
		}
		if (sl->live && nfree != sl->nr_free)
			FAIL("a slab's free count is wrong");
	}
	for (uint32_t s = 0; s < ns->slab_slots_used; s++) {
		const struct kvd_slab *sl = &ns->slabs[s];

		for (uint32_t i = 0; sl->live && i < sl->nr_carved; i++) {
			uint32_t id = sl->first_block + i;

			if (ns->blocks[id].committed &&
			    ns->blocks[id].nr_children != kids[id])
				FAIL("a child count is wrong");
		}
	}
	for (uint32_t id = ns->lru_head; id != KVD_NIL && n <= on_lru;
	     id = ns->blocks[id].lru_next)
		n++;
	if (used != ns->blocks_used || cached != ns->cached_blocks ||
	    committed != ns->committed_blocks)
		FAIL("block counters are wrong");
	if (owned != ns->holds.owned)
		FAIL("the count of owned blocks is wrong");
	if (on_lru != ns->lru_len || n != on_lru)
		FAIL("the LRU list and its length disagree");
	ret = 0;
#undef FAIL
out:
	free(refs);
	free(kids);
	return ret;
}
