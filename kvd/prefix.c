// SPDX-License-Identifier: MIT
/*
 * The prefix cache of a namespace: committed blocks indexed by their
 * block hash, ref-0 ones kept on an LRU for eviction. A leaf: it keeps
 * the index and the LRU in the blocks' books and knows nothing of holds
 * or slabs; what it evicts it returns, and ns.c reuses or frees it.
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
 * A hit takes its ref (ns.c) in the same request as the lookup (the daemon
 * is one thread), so there is no window in which a hit block can be
 * evicted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ns_internal.h"

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

/* The index key of client hash @h: mixed with the tenant secret. */
struct kv_hash kvd_prefix_key(const struct kvd_ns *ns, const struct kv_hash *h)
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
	index_add(ns, id);
	ns->committed_blocks++;
	if (!is_root(parent)) {
		struct kv_hash pkey = kvd_prefix_key(ns, parent);

		p = kvd_prefix_find(ns, &pkey);
	}
	if (p == KVD_NIL || p == id)
		return;
	b->parent = p;
	if (ns->blocks[p].nr_children++ == 0)
		lru_del(ns, p);	/* no longer a leaf */
}
