// SPDX-License-Identifier: MIT
/*
 * The prefix cache of a namespace: committed blocks indexed by their
 * block hash, ref-0 ones kept on an LRU for eviction. A leaf: it keeps
 * the index and the LRU in the blocks' books and knows nothing of holds
 * or slabs (but for two counts of a slab's books that reclaim reads: its
 * newest release and its links to children in other slabs); what it
 * evicts it returns, and ns.c reuses or frees it.
 *
 * Keys. A client's block hash is mixed with the namespace's tenant key
 * (XXH3-128 keyed with a 192-byte secret derived from the tenant's whole
 * secret: kvd/tenant.c) before it is used as a key, so two tenants never
 * hit each other's blocks, even for equal prompts, nor can a client aim
 * its hashes at one bucket of the index; and the
 * index is per namespace, so a block committed under one model id or
 * geometry is never hit under another.
 *
 * Eviction is LRU among ref-0 committed blocks, leaf first: a block with
 * committed children is not on the LRU, so no cached block ever becomes
 * unreachable through the index. When the last child of a ref-0 parent is
 * evicted, the parent joins the LRU at the place of its own last use (its
 * tick), not at the cold end: a lookup may hit the parent without adding
 * a child (a short query after a system prompt), so a parent can be
 * younger than leaves still listed. So eviction is exact LRU under the
 * leaf-first rule: as vLLM's free block queue, which frees a request's
 * blocks tail first, orders a stream of whole prefixes. A hit, a release
 * and most evictions are O(1) per block; a parent re-entering in the
 * middle of the list costs O(log n) (the heap below).
 *
 * A hit takes its ref (ns.c) in the same request as the lookup (the daemon
 * is one thread), so there is no window in which a hit block can be
 * evicted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_SECRET_SIZE_MIN */
#include <xxhash.h>

#include "ns_internal.h"

_Static_assert(KVD_TENANT_KEY_BYTES >= XXH3_SECRET_SIZE_MIN,
	       "XXH3_128bits_withSecret needs XXH3_SECRET_SIZE_MIN bytes");

int kvd_prefix_init(struct kvd_ns *ns)
{
	uint64_t nb = 1;

	while (nb < ns->max_blocks)
		nb <<= 1;
	ns->index = calloc(nb, sizeof(*ns->index));	/* untouched until used */
	if (!ns->index)
		return -ENOMEM;
	ns->index_mask = (uint32_t)(nb - 1);
	/* the heap beside the LRU list: untouched until used */
	ns->lru_heap = calloc(ns->max_blocks, sizeof(*ns->lru_heap));
	if (!ns->lru_heap)
		return -ENOMEM;
	ns->lru_head = ns->lru_tail = KVD_NIL;
	return 0;
}

void kvd_prefix_exit(struct kvd_ns *ns)
{
	free(ns->index);
	free(ns->lru_heap);
	ns->index = NULL;
	ns->lru_heap = NULL;
	explicit_bzero(&ns->key, sizeof(ns->key));
}

/* The index key of client hash @h under tenant key @k. */
struct kv_hash kvd_key_hash(const struct kvd_tenant_key *k,
			    const struct kv_hash *h)
{
	XXH128_hash_t x = XXH3_128bits_withSecret(h->b, sizeof(h->b),
						  k->b, sizeof(k->b));
	struct kv_hash key;

	XXH128_canonicalFromHash((XXH128_canonical_t *)key.b, x);
	return key;
}

/* The index key of client hash @h: mixed with the tenant key. */
struct kv_hash kvd_prefix_key(const struct kvd_ns *ns, const struct kv_hash *h)
{
	return kvd_key_hash(&ns->key, h);
}

static bool is_root(const struct kv_hash *h)
{
	static const struct kv_hash zero;

	return !memcmp(h, &zero, sizeof(*h));
}

static uint32_t *bucket(const struct kvd_ns *ns, const struct kv_hash *key)
{
	uint32_t b;

	memcpy(&b, key->b, sizeof(b));	/* keys are uniformly random */
	return &ns->index[b & ns->index_mask];
}

/* The committed block under @key, KVD_NIL if none. */
uint32_t kvd_prefix_find(const struct kvd_ns *ns, const struct kv_hash *key)
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

/*
 * ---- LRU: evictable blocks (cached leaves) in the order of their tick ----
 *
 * A block's tick is the pool clock at its last release, under its
 * priority (ns_internal.h). A fresh release takes a new tick, the largest
 * of its priority: at one priority it goes at the tail of the list, which
 * so stays sorted by tick, head oldest. A parent that becomes a leaf
 * again (its last child evicted), or a block a failed request gives back,
 * must go at its own tick, which may lie anywhere: at either end of the
 * list when it fits there, else into a min-heap by tick beside the list.
 * The oldest block is the older of the list's head and the heap's top.
 * The heap holds only parents hit more recently than the list's head was
 * released (a hot system prompt between shorter queries), so it stays
 * small; the hot path (hit, release) is O(1) list work. With blocks of
 * several priorities cached, a release below the tail's priority goes
 * to the heap instead: O(log n), only for who sets priorities (RETAIN).
 */

#define LRU_IN_HEAP	(KVD_NIL - 1)	/* lru_next of a heap member */

static uint64_t tick_of(const struct kvd_ns *ns, uint32_t id)
{
	return ns->blocks[id].tick;
}

static void heap_set(struct kvd_ns *ns, uint32_t i, uint32_t id)
{
	ns->lru_heap[i] = id;
	ns->blocks[id].lru_prev = i;	/* a heap member's position */
}

static void heap_up(struct kvd_ns *ns, uint32_t i)
{
	uint32_t id = ns->lru_heap[i];
	uint64_t t = tick_of(ns, id);

	while (i) {
		uint32_t up = (i - 1) / 2;

		if (tick_of(ns, ns->lru_heap[up]) <= t)
			break;
		heap_set(ns, i, ns->lru_heap[up]);
		i = up;
	}
	heap_set(ns, i, id);
}

static void heap_down(struct kvd_ns *ns, uint32_t i)
{
	uint32_t id = ns->lru_heap[i], n = ns->lru_heap_len;
	uint64_t t = tick_of(ns, id);

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && tick_of(ns, ns->lru_heap[c + 1]) <
				 tick_of(ns, ns->lru_heap[c]))
			c++;
		if (t <= tick_of(ns, ns->lru_heap[c]))
			break;
		heap_set(ns, i, ns->lru_heap[c]);
		i = c;
	}
	heap_set(ns, i, id);
}

/* The heap is off the hot path: out of line, so the list code stays small. */
static __cold void heap_add(struct kvd_ns *ns, uint32_t id)
{
	ns->blocks[id].lru_next = LRU_IN_HEAP;
	heap_set(ns, ns->lru_heap_len, id);
	heap_up(ns, ns->lru_heap_len++);
}

static __cold void heap_del(struct kvd_ns *ns, uint32_t id)
{
	uint32_t i = ns->blocks[id].lru_prev, last;

	last = ns->lru_heap[--ns->lru_heap_len];
	if (last == id)
		return;
	heap_set(ns, i, last);
	heap_up(ns, i);
	heap_down(ns, ns->blocks[last].lru_prev);
}

static void list_add_tail(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	b->lru_next = KVD_NIL;
	b->lru_prev = ns->lru_tail;
	if (ns->lru_tail != KVD_NIL)
		ns->blocks[ns->lru_tail].lru_next = id;
	else
		ns->lru_head = id;
	ns->lru_tail = id;
}

static void list_add_head(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	b->lru_prev = KVD_NIL;
	b->lru_next = ns->lru_head;
	if (ns->lru_head != KVD_NIL)
		ns->blocks[ns->lru_head].lru_prev = id;
	else
		ns->lru_tail = id;
	ns->lru_head = id;
}

/* On the LRU at the place of its own tick. */
static void lru_add_at_tick(struct kvd_ns *ns, uint32_t id)
{
	uint64_t t = tick_of(ns, id);

	/* mostly a parent older than the head (released before its child) */
	if (ns->lru_head != KVD_NIL && t < tick_of(ns, ns->lru_head))
		list_add_head(ns, id);
	else if (ns->lru_head == KVD_NIL || t > tick_of(ns, ns->lru_tail))
		list_add_tail(ns, id);
	else
		heap_add(ns, id);	/* between the ends: rare */
	ns->blocks[id].on_lru = true;
	ns->lru_len++;
}

static void lru_del(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (!b->on_lru)
		return;
	b->on_lru = false;
	ns->lru_len--;
	if (unlikely(b->lru_next == LRU_IN_HEAP)) {
		heap_del(ns, id);
		return;
	}
	if (b->lru_prev != KVD_NIL)
		ns->blocks[b->lru_prev].lru_next = b->lru_next;
	else
		ns->lru_head = b->lru_next;
	if (b->lru_next != KVD_NIL)
		ns->blocks[b->lru_next].lru_prev = b->lru_prev;
	else
		ns->lru_tail = b->lru_prev;
}

/* The least recently used evictable block, KVD_NIL if none. */
uint32_t kvd_prefix_lru_first(const struct kvd_ns *ns)
{
	uint32_t id = ns->lru_head;

	if (likely(!ns->lru_heap_len))
		return id;
	if (id == KVD_NIL || tick_of(ns, ns->lru_heap[0]) < tick_of(ns, id))
		return ns->lru_heap[0];
	return id;
}

/*
 * @id was linked to its parent (@d 1) or unlinked (@d -1): a parent in
 * another slab counts it there, as that slab cannot be reclaimed whole
 * (ns.c) while a child elsewhere still hangs from it (leaf first).
 */
static void link_count(struct kvd_ns *ns, uint32_t id, int d)
{
	const struct kvd_block *b = &ns->blocks[id];
	uint32_t ps;

	if (b->parent == KVD_NIL)
		return;
	ps = ns->blocks[b->parent].slab;
	if (ps != b->slab)
		ns->slabs[ps].nr_out += (uint32_t)d;
}

/* A committed block's last ref went: it stays, cached, at the MRU end. */
void kvd_prefix_cache(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	ns->pool->frees++;	/* evictable now: a waiting ALLOC may use it */
	b->state = KVD_BLOCK_CACHED;
	b->tick = (b->tick & ~KVD_CLOCK_MASK) | ++ns->pool->clock;
	if (b->tick > ns->slabs[b->slab].tick)	/* its slab's newest use */
		ns->slabs[b->slab].tick = b->tick;
	ns->cached_blocks++;
	if (!b->nr_children)
		lru_add_at_tick(ns, id);	/* the tail but for priorities */
}

/* A cached block gets a ref again: off the LRU, out of the cache count. */
void kvd_prefix_uncache(struct kvd_ns *ns, uint32_t id)
{
	lru_del(ns, id);
	ns->cached_blocks--;
}

/*
 * A ref taken by a request that then failed goes again: the block is
 * cached as it was, at its old tick (its place in the LRU), not as a
 * fresh release; nothing new became free, so waiters are not woken.
 */
void kvd_prefix_recache(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	b->state = KVD_BLOCK_CACHED;
	ns->cached_blocks++;
	if (!b->nr_children)
		lru_add_at_tick(ns, id);
}

/*
 * Drop @id (a cached leaf) from the cache; the caller reuses or frees it.
 * Its key, tick and parent stay in its books until it is published
 * again, so kvd_prefix_unevict() can put it back.
 */
static void evict(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t p = b->parent;

	lru_del(ns, id);
	index_del(ns, id);
	link_count(ns, id, -1);
	b->committed = false;
	ns->committed_blocks--;
	ns->cached_blocks--;
	ns->evictions++;
	if (p == KVD_NIL)
		return;
	/* The parent may now be a leaf: it joins at its own last use. */
	if (--ns->blocks[p].nr_children == 0 && ns->blocks[p].ref == 0)
		lru_add_at_tick(ns, p);
}

/* Evict the LRU leaf for reuse: 0 and its id, or -ENOSPC if none. */
int kvd_prefix_evict_one(struct kvd_ns *ns, uint32_t *id)
{
	uint32_t first = kvd_prefix_lru_first(ns);

	if (first == KVD_NIL)
		return -ENOSPC;
	*id = first;
	evict(ns, first);
	return 0;
}

/* Evict @id, a cached leaf, for the reclaim of its whole slab (ns.c). */
void kvd_prefix_evict_leaf(struct kvd_ns *ns, uint32_t id)
{
	kvd_warn_on_once(!ns->blocks[id].on_lru);
	evict(ns, id);
}

/*
 * Undo evict(@id) for a request that failed: @id, not published since
 * and now ref 0 again, is cached under its old key, child of its old
 * parent, at its old tick. Undone in the reverse order of the evictions,
 * the LRU, the index and the counters are as before them.
 */
void kvd_prefix_unevict(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t p = b->parent;

	index_add(ns, id);
	b->committed = true;
	ns->committed_blocks++;
	ns->evictions--;
	link_count(ns, id, 1);
	if (p != KVD_NIL && ns->blocks[p].nr_children++ == 0)
		lru_del(ns, p);
	kvd_prefix_recache(ns, id);
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
		key[j] = kvd_prefix_key(ns, &hashes[j]);
		b[j] = bucket(ns, &key[j]);
		__builtin_prefetch(b[j]);
	}
	for (uint32_t j = 0; j < n; j++)
		if (*b[j])
			__builtin_prefetch(&ns->blocks[*b[j] - 1]);
}

/*
 * kvd_prefix_match - the longest committed prefix of @hashes: stops at
 * the first miss. Returns the hit count h, ids in @ids[0..h); no ref is
 * taken (the caller takes them before anything can evict).
 */
uint32_t kvd_prefix_match(struct kvd_ns *ns, const struct kv_hash *hashes,
			  uint32_t nr, uint32_t *ids)
{
	struct kv_hash key[LOOKUP_AHEAD];
	uint32_t h;

	for (h = 0; h < nr; h++) {
		uint32_t id, j = h % LOOKUP_AHEAD;

		/* Keys and buckets a chunk ahead: their misses overlap. */
		if (!j)
			lookup_ahead(ns, hashes + h, key,
				     nr - h < LOOKUP_AHEAD ? nr - h :
				     LOOKUP_AHEAD);
		id = kvd_prefix_find(ns, &key[j]);
		if (id == KVD_NIL)
			break;
		ids[h] = id;
	}
	return h;
}

/* Publish @id under @key, linked to its parent if that is committed. */
void kvd_prefix_publish(struct kvd_ns *ns, uint32_t id,
			const struct kv_hash *key, const struct kv_hash *parent)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t p = KVD_NIL;

	b->key = *key;
	b->committed = true;
	b->parent = KVD_NIL;
	kvd_block_set_prio(b, KV_PRIO_DEFAULT);	/* until a RETAIN */
	index_add(ns, id);
	ns->committed_blocks++;
	if (!is_root(parent)) {
		struct kv_hash pkey = kvd_prefix_key(ns, parent);

		p = kvd_prefix_find(ns, &pkey);
	}
	if (p == KVD_NIL || p == id)
		return;
	b->parent = p;
	link_count(ns, id, 1);
	if (ns->blocks[p].nr_children++ == 0)
		lru_del(ns, p);	/* no longer a leaf */
}
