// SPDX-License-Identifier: MIT
/*
 * Namespaces, on top of the subsystem's layers (ns_internal.h): block
 * refs, and the operations a client sends (alloc, lookup, alloc_prefix,
 * commit, release, ref, cow). A request comes down here once and goes
 * down into reclaim.c (room for it, reclaim across namespaces),
 * prefix.c (the index and LRU), hold.c (who holds what) and slab.c
 * (blocks, over pool.c); none of those calls back up: eviction returns
 * the block it took, and this file reuses it or gives it back to its
 * slab.
 *
 * A namespace owns the slabs of one geometry; a block's ref count is the
 * sum of its holds' counts. At ref 0 a committed block stays, cached, on
 * the LRU; any other goes back to its slab.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ns_internal.h"

/* Opaque blocks: runs of bytes in another engine's layout (abi.h). */
static int opaque_check(const struct kv_geometry *g, const char **why)
{
	if (g->kv_heads != 1 || g->quant) {
		*why = "an opaque geometry has kv_heads 1 and no quantization";
		return -EINVAL;
	}
	if (g->layers > 1024 || g->block_tokens > 1024 ||
	    g->run_bytes > KV_OPAQUE_RUN_MAX) {
		*why = "opaque geometry: above 1024 runs or block tokens, or a run above 1 GiB";
		return -EINVAL;
	}
	return 0;
}

int kvd_geometry_check(const struct kv_geometry *g, uint64_t pool_bytes,
		       const char **why)
{
	uint64_t bb;
	int ret;

	if (!g->layers || !g->kv_heads || !g->head_dim || !g->block_tokens) {
		*why = "geometry counts must be >= 1";
		return -EINVAL;
	}
	if (g->dtype == KV_DTYPE_OPAQUE) {
		ret = opaque_check(g, why);
		if (ret)
			return ret;
	} else if (g->layers > 1024 || g->kv_heads > 1024 ||
		   g->head_dim > 1024 || g->block_tokens > 1024) {
		*why = "geometry count above 1024";
		return -EINVAL;
	}
	if (!kv_dtype_bytes(g->dtype)) {
		*why = "unknown KV dtype";
		return -EINVAL;
	}
	if (g->quant >= KV_QUANT__MAX) {
		*why = "unknown quantization scheme";
		return -EINVAL;
	}
	if (g->quant && g->dtype != KV_DTYPE_FP8_E4M3 &&
	    g->dtype != KV_DTYPE_INT8) {
		*why = "quantization scales need the fp8_e4m3 or int8 dtype";
		return -EINVAL;
	}
	if (g->tp_rank >= (g->tp_size ? g->tp_size : 1) || g->tp_size > 1024) {
		*why = "tp_rank must be below tp_size (at most 1024)";
		return -EINVAL;
	}
	bb = kv_geometry_block_bytes(g);
	if (bb % 256 || bb > (1ULL << 30)) {
		*why = "block bytes must be a multiple of 256 and at most 1 GiB";
		return -EINVAL;
	}
	if (bb > pool_bytes / 2) {
		*why = "block larger than half the pool";
		return -E2BIG;
	}
	if (pool_bytes / bb > KVD_NS_MAX_BLOCKS) {
		*why = "more than 2^26 blocks of this size fit the pool: use larger blocks";
		return -E2BIG;
	}
	if (kvd_slab_pages_for(bb) * KV_PAGE_BYTES > pool_bytes) {
		*why = "one slab of such blocks is larger than the pool";
		return -E2BIG;
	}
	return 0;
}

/* Everything that changes a block's bytes is part of the key. */
bool kvd_ns_match(const struct kvd_ns *ns, const char *model_id,
		  const char *model_rev, const struct kv_geometry *g,
		  uint32_t tenant)
{
	return ns->live && ns->tenant == tenant &&
	       !strcmp(ns->model_id, model_id) &&
	       !strcmp(ns->model_rev, model_rev) &&
	       !memcmp(&ns->geom, g, sizeof(*g));
}

/* ---- prefix-cache counters kept by model key (struct kvd_ns_kept) ---- */

static bool kept_match(const struct kvd_ns_kept *k, const struct kvd_ns *ns)
{
	return k->used && k->tenant == ns->tenant &&
	       !strcmp(k->model_id, ns->model_id) &&
	       !strcmp(k->model_rev, ns->model_rev) &&
	       !memcmp(&k->geom, &ns->geom, sizeof(k->geom));
}

/* The kept record of slot @i of @ns's pool; @ns's own when it has none. */
static struct kvd_ns_kept *kept_at(struct kvd_ns *ns, uint32_t i)
{
	return ns->pool->ns ? &ns->pool->ns[i].kept : &ns->kept;
}

/* A model coming back takes up its counters where they stopped. */
static void counters_adopt(struct kvd_ns *ns)
{
	uint32_t n = ns->pool->ns ? ns->pool->nr_ns : 1;

	for (uint32_t i = 0; i < n; i++) {
		struct kvd_ns_kept *k = kept_at(ns, i);

		if (!kept_match(k, ns))
			continue;
		ns->lookups = k->lookups;
		ns->lookup_blocks = k->lookup_blocks;
		ns->hit_blocks = k->hit_blocks;
		ns->evictions = k->evictions;
		memset(k, 0, sizeof(*k));
		return;
	}
}

/*
 * @ns is freed: keep its counters in its slot's record, else in a free
 * one of another slot; with none free, its slot's older record goes.
 */
static void counters_keep(struct kvd_ns *ns)
{
	struct kvd_ns_kept *k = &ns->kept;
	uint32_t n = ns->pool->ns ? ns->pool->nr_ns : 0;

	if (!ns->lookups && !ns->evictions)
		return;
	for (uint32_t i = 0; k->used && i < n; i++)
		if (!ns->pool->ns[i].kept.used)
			k = &ns->pool->ns[i].kept;
	k->used = true;
	k->tenant = ns->tenant;
	memcpy(k->model_id, ns->model_id, sizeof(k->model_id));
	memcpy(k->model_rev, ns->model_rev, sizeof(k->model_rev));
	k->geom = ns->geom;
	k->lookups = ns->lookups;
	k->lookup_blocks = ns->lookup_blocks;
	k->hit_blocks = ns->hit_blocks;
	k->evictions = ns->evictions;
}

/*
 * kvd_ns_kept_drop - forget the kept counters of tenant index @tenant in
 * every slot of @pool: its slot goes to another uid (kvd/tenant.c), who
 * must not take up its counters.
 */
void kvd_ns_kept_drop(struct kvd_pool *pool, uint32_t tenant)
{
	for (uint32_t i = 0; pool->ns && i < pool->nr_ns; i++) {
		struct kvd_ns_kept *k = &pool->ns[i].kept;

		if (k->used && k->tenant == tenant)
			memset(k, 0, sizeof(*k));
	}
}

/*
 * Slab bytes that hold no block, per million, over the live slabs (or
 * for one slab at pool offset 0 when there is none yet).
 */
uint32_t kvd_ns_waste_ppm(const struct kvd_ns *ns)
{
	uint64_t slab = ns->slab_bytes, used;

	if (ns->nr_slabs) {
		slab *= ns->nr_slabs;
		used = (uint64_t)ns->nr_blocks * ns->block_bytes;
	} else {
		used = slab / ns->block_bytes * ns->block_bytes;
	}
	return (uint32_t)((slab - used) * 1000000 / slab);
}

int kvd_ns_init(struct kvd_ns *ns, struct kvd_pool *pool, uint32_t id,
		const char *model_id, const char *model_rev,
		const struct kv_geometry *g, uint32_t tenant,
		const struct kvd_tenant_key *key)
{
	struct kvd_ns_kept kept = ns->kept;	/* the slot's, not ours */
	int ret;

	memset(ns, 0, sizeof(*ns));
	ns->kept = kept;
	ns->id = id;
	ns->tenant = tenant;
	ns->key = *key;
	ns->pool = pool;
	ns->geom = *g;
	snprintf(ns->model_id, sizeof(ns->model_id), "%s", model_id);
	snprintf(ns->model_rev, sizeof(ns->model_rev), "%s", model_rev);
	ns->block_bytes = kv_geometry_block_bytes(g);
	if (pool->bytes / ns->block_bytes > KVD_NS_MAX_BLOCKS)
		return -E2BIG;
	ns->max_blocks = (uint32_t)(pool->bytes / ns->block_bytes);
	ret = kvd_slab_geometry(ns);
	if (ret)
		return ret;
	ns->blocks = calloc(ns->max_blocks, sizeof(*ns->blocks));
	ret = -ENOMEM;
	if (!ns->blocks)
		goto err_free;
	ret = kvd_slab_init(ns);
	if (ret)
		goto err_free;
	/* Each block has one holder mostly; shared ones more (fork, REF). */
	/* Shared prefixes give one block many holders: room for that. */
	/* Owners count in the block; the table is for other holders of
	 * shared blocks: many engines on one long system prompt, even on a
	 * pool of few blocks (memory untouched until used). */
	ret = kvd_holds_init(&ns->holds, 4 * ns->max_blocks + 65536);
	if (ret)
		goto err_free;
	ret = kvd_prefix_init(ns);
	if (ret)
		goto err_free;
	kvd_pins_init(&ns->pins, ns->max_blocks);
	kvd_holder_init(&ns->pin_holder, KVD_PIN_SLOT);
	counters_adopt(ns);
	ns->live = true;
	ns->pool->nr_live_ns++;
	return 0;

err_free:
	kvd_ns_exit(ns);
	return ret;
}

void kvd_ns_exit(struct kvd_ns *ns)
{
	struct kvd_ns_kept kept;

	if (ns->live) {
		ns->pool->nr_live_ns--;
		counters_keep(ns);
	}
	kept = ns->kept;
	kvd_slab_exit(ns);
	free(ns->blocks);
	kvd_holds_exit(&ns->holds);
	kvd_prefix_exit(ns);
	kvd_pins_exit(&ns->pins);
	if (ns->pool)
		ns->pool->pinned_pages -= ns->pinned_pages;
	memset(ns, 0, sizeof(*ns));
	ns->kept = kept;
}

/* @id takes its first ref (@d 1) or drops its last (@d -1): per slab. */
static void held_count(struct kvd_ns *ns, uint32_t id, int d)
{
	ns->slabs[ns->blocks[id].slab].nr_held += (uint32_t)d;
}

uint32_t kvd_ns_peek(const struct kvd_ns *ns, const struct kv_hash *hashes,
		     uint32_t nr)
{
	uint32_t h;

	for (h = 0; h < nr; h++) {
		struct kv_hash key = kvd_prefix_key(ns, &hashes[h]);

		if (kvd_prefix_find(ns, &key) == KVD_NIL)
			break;
	}
	return h;
}

struct kv_hash kvd_ns_key(const struct kvd_ns *ns, const struct kv_hash *h)
{
	return kvd_prefix_key(ns, h);
}

/*
 * A new block with one ref: free blocks first (a slab's free list, then a
 * new slab from the page pool), then the least recently used cached leaf
 * is evicted (kvd/prefix.c) and marked, so that a request that fails
 * after it can put it back (alloc_ids). -ENOSPC only when nothing is
 * evictable.
 */
static int block_alloc(struct kvd_ns *ns, uint32_t *id)
{
	struct kvd_block *b;
	int ret;

	if (ns->partial == KVD_NIL) {
		ret = kvd_slab_new(ns);
		/* Out of pages: reclaim from the coldest namespace, which
		 * may be this one (its LRU leaf is then reused at once). */
		while (ret == -ENOSPC && kvd_ns_reclaim(ns) > 0)
			ret = kvd_slab_new(ns);
		if ((ret == -ENOSPC || ret == -EDQUOT) &&
		    !kvd_prefix_evict_one(ns, id)) {
			ns->blocks[*id].mark = true;
			kvd_evicted(ns, *id);
			goto take;
		}
		if (ret < 0)
			return ret;
	}
	*id = kvd_slab_carve(ns);	/* from the slab just made, if any */
take:
	b = &ns->blocks[*id];
	b->ref = 1;
	b->state = KVD_BLOCK_HELD;
	ns->blocks_used++;
	held_count(ns, *id, 1);
	return 0;
}

/* ---- refs ---- */

/* One more ref; a cached block leaves the cache (and the LRU). */
static void block_get(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (b->ref++ == 0) {
		kvd_warn_on_once(b->state != KVD_BLOCK_CACHED);
		kvd_prefix_uncache(ns, id);
		b->state = KVD_BLOCK_HELD;
		ns->blocks_used++;
		held_count(ns, id, 1);
	}
}

/* One ref less; at 0 a committed block is cached, any other freed. */
static void block_put(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (--b->ref)
		return;
	ns->blocks_used--;
	held_count(ns, id, -1);
	if (b->committed)
		kvd_prefix_cache(ns, id);
	else
		kvd_slab_free_block(ns, id);
}

/*
 * One more ref on @id for @hr, which may or may not hold it already.
 * -EOVERFLOW at KVD_REF_MAX refs (far below 2^32: nothing ever wraps),
 * -ENOMEM when the hold table is full.
 */
static int hold_get(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t *c = NULL;

	if (b->ref >= KVD_REF_MAX)
		return -EOVERFLOW;
	/* Only the owner holds it (ref == own_refs): no hash lookup. */
	if (b->owner == hr->slot + 1 || (b->ref && !(b->owner &&
					 b->ref == b->own_refs)))
		c = kvd_hold_counter(ns, hr->slot, id);
	if (c) {
		(*c)++;
		hr->nr_refs++;
		block_get(ns, id);
		return 0;
	}
	if (b->owner && ns->holds.nr >= ns->holds.cap)
		return -ENOMEM;
	block_get(ns, id);		/* off the LRU before the links move */
	kvd_hold_add(ns, hr, id);
	return 0;
}

/* One ref less on @id, which @hr holds (checked by the caller). */
static void hold_put(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	if (--*kvd_hold_counter(ns, hr->slot, id) == 0)
		kvd_hold_del(ns, hr, id);
	hr->nr_refs--;
	block_put(ns, id);
}

int kvd_ns_hold_get(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	return hold_get(ns, hr, id);
}

void kvd_ns_hold_put(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	hold_put(ns, hr, id);
}

/*
 * Undo hold_get() of a request that failed: the ref goes, and a block
 * that was cached before is cached again as it was (its old tick, its
 * place in the LRU; no waiter woken), not released afresh.
 */
static void hold_unget(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (--*kvd_hold_counter(ns, hr->slot, id) == 0)
		kvd_hold_del(ns, hr, id);
	hr->nr_refs--;
	if (--b->ref)
		return;
	ns->blocks_used--;
	held_count(ns, id, -1);
	kvd_prefix_recache(ns, id);
}

/* ---- operations ---- */

/*
 * kvd_ns_alloc_check - may @hr be given @nr new refs at all? -EINVAL for
 * none, -E2BIG past max_blocks, -ENOMEM hold table full, -EDQUOT past
 * the client's max_client_blocks. ALLOC and ALLOC_PREFIX share it.
 */
int kvd_ns_alloc_check(const struct kvd_ns *ns, const struct kvd_holder *hr,
		       uint32_t nr)
{
	if (!nr)
		return -EINVAL;
	if (nr > ns->max_blocks)
		return -E2BIG;
	if (ns->holds.cap - ns->holds.nr < nr)
		return -ENOMEM;
	if (!kvd_holder_room(hr, nr))
		return -EDQUOT;
	return 0;
}

/*
 * Undo block_alloc() + kvd_hold_add() of @id for a request that failed:
 * a block evicted for it is put back in the cache as it was, any other
 * goes back to its slab, and pool->frees is left as it was (the caller):
 * nothing became free that was not free before.
 */
static void block_unalloc(struct kvd_ns *ns, struct kvd_holder *hr,
			  uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	kvd_hold_del(ns, hr, id);
	hr->nr_refs--;
	b->ref = 0;
	ns->blocks_used--;
	held_count(ns, id, -1);
	if (b->mark) {
		b->mark = false;
		kvd_prefix_unevict(ns, id);
	} else {
		kvd_slab_free_block(ns, id);
	}
}

/*
 * Checked by the caller: @nr blocks for @hr, all or nothing. A failure
 * leaves the namespace's books, its LRU order and its counters as they
 * were: the blocks evicted on the way are put back, in reverse order.
 * Blocks reclaimed from other namespaces (pool->reclaims) cannot be put
 * back, so kvd_ns_room_check() refuses first what its rehearsal of reclaim
 * cannot serve: a request that fails has reclaimed nothing (but where an
 * extent taken over cannot be backed, kvd_slab_new's -ENOMEM).
 */
static int alloc_ids_marked(struct kvd_ns *ns, struct kvd_holder *hr,
			    uint32_t *ids, uint32_t nr)
{
	uint64_t frees = ns->pool->frees, reclaims = ns->pool->reclaims;
	uint32_t i, id;
	int ret;

	/* Cheap refusal first, so a hopeless ALLOC evicts nothing. */
	ret = kvd_ns_room_check(ns, nr);
	if (ret)
		return ret;
	for (i = 0; i < nr; i++) {
		ret = block_alloc(ns, &id);
		if (ret)
			goto err_unwind;
		kvd_hold_add(ns, hr, id);
		ids[i] = id;
	}
	return (int)nr;

err_unwind:
	while (i--)
		block_unalloc(ns, hr, ids[i]);
	/* No waiter to wake, unless pages came back from another namespace. */
	if (ns->pool->reclaims == reclaims)
		ns->pool->frees = frees;
	return ret;
}

/* The blocks evicted for @ids are gone for good: their marks go. */
static void alloc_done(struct kvd_ns *ns, const uint32_t *ids, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++)
		if (ids[i] != KVD_NIL)
			ns->blocks[ids[i]].mark = false;
}

static int alloc_ids(struct kvd_ns *ns, struct kvd_holder *hr,
		     uint32_t *ids, uint32_t nr)
{
	uint64_t evictions = ns->evictions;
	int ret = alloc_ids_marked(ns, hr, ids, nr);

	/* marks only where it evicted: no second pass when blocks were free */
	if (ret > 0 && ns->evictions != evictions)
		alloc_done(ns, ids, nr);
	return ret;
}

/*
 * kvd_ns_alloc - @nr new blocks, each with one ref held by @hr; ids
 * written to @ids. All or nothing: -ENOSPC leaves the books unchanged,
 * -ENOMEM when the hold table is full (or no scratch memory for
 * room_check), -E2BIG when nr exceeds max_blocks.
 */
int kvd_ns_alloc(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		 uint32_t nr)
{
	int ret = kvd_ns_alloc_check(ns, hr, nr);

	return ret ? ret : alloc_ids(ns, hr, ids, nr);
}

/* How many of @nr more refs @hr may take (kvd_holder_room() for each). */
static uint32_t holder_room_left(const struct kvd_holder *hr, uint32_t nr)
{
	uint64_t max = hr->max_refs ? hr->max_refs : KVD_CLIENT_REFS_MAX;
	uint64_t left = max > hr->nr_refs ? max - hr->nr_refs : 0;

	return left < nr ? (uint32_t)left : nr;
}

/*
 * The longest committed prefix of @hashes, a ref taken on each hit for
 * @hr before anything else can evict it; counts nothing (the caller, once
 * its request succeeds). The room in the hold table is checked first.
 */
static uint32_t take_hits(struct kvd_ns *ns, struct kvd_holder *hr,
			  const struct kv_hash *hashes, uint32_t nr,
			  uint32_t *ids)
{
	uint32_t h, hits;

	/* no more than the client may hold; the index stops at a miss */
	hits = kvd_prefix_match(ns, hashes, holder_room_left(hr, nr), ids);
	/* a block at KVD_REF_MAX ends the prefix too */
	for (h = 0; h < hits; h++)
		if (hold_get(ns, hr, ids[h]))
			break;
	return h;
}

/*
 * kvd_ns_lookup - the longest committed prefix of @hashes: stops at
 * the first miss. Each hit gets a ref for @hr at once. Returns the hit
 * count h (ids in @ids[0..h)), or -ENOMEM when the hold table is full
 * (nothing taken, nothing counted).
 */
int kvd_ns_lookup(struct kvd_ns *ns, struct kvd_holder *hr,
		  const struct kv_hash *hashes, uint32_t nr, uint32_t *ids)
{
	uint32_t h;

	if (ns->holds.cap - ns->holds.nr < nr)
		return -ENOMEM;
	h = take_hits(ns, hr, hashes, nr, ids);
	ns->lookups++;
	ns->lookup_blocks += nr;
	ns->hit_blocks += h;
	return (int)h;
}

/*
 * kvd_ns_alloc_prefix - lookup of @n_hashes hashes, then new blocks for the
 * rest of @nr ids. All or nothing: on error the hits are given back as
 * they were (their places in the LRU kept) and nothing is counted, so a
 * waiting request tried again and again changes nothing until it is
 * served.
 */
int kvd_ns_alloc_prefix(struct kvd_ns *ns, struct kvd_holder *hr,
			const struct kv_hash *hashes, uint32_t n_hashes,
			uint32_t *ids, uint32_t nr)
{
	uint32_t h;
	int ret;

	if (n_hashes > nr)
		return -EINVAL;
	ret = kvd_ns_alloc_check(ns, hr, nr);
	if (ret)
		return ret;
	h = take_hits(ns, hr, hashes, n_hashes, ids);
	if (h < nr) {
		ret = alloc_ids(ns, hr, ids + h, nr - h);
		if (ret < 0)
			goto err_hits;
	}
	ns->lookups++;
	ns->lookup_blocks += n_hashes;
	ns->hit_blocks += h;
	return (int)h;

err_hits:
	while (h--)
		hold_unget(ns, hr, ids[h]);
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

/*
 * kvd_ns_commit - publish each block of @e (a private copy) under its
 * hash. All entries are checked first: -EINVAL (id out of range, flags,
 * the same id twice), -EPERM (not held by @hr), -EEXIST (already
 * committed) or -ENOMEM (hold table full); then nothing changes. A hash
 * already in the index is a
 * duplicate: @hr's block is released, a ref on the cached block taken
 * instead, and the entry's id replaced (flags KV_COMMIT_DEDUP).
 */
int kvd_ns_commit(struct kvd_ns *ns, struct kvd_holder *hr,
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
		struct kv_hash key = kvd_prefix_key(ns, &e[i].hash);
		uint32_t have = kvd_prefix_find(ns, &key);

		if (have == KVD_NIL) {
			kvd_prefix_publish(ns, e[i].id, &key, &e[i].parent);
			if (ns->pool->on_stored)	/* KV events */
				ns->pool->on_stored(ns->pool, ns, e[i].id,
						    &e[i].hash, &e[i].parent);
			continue;
		}
		/* Take the cached block first: the hold table has room for
		 * the swap, as ours is dropped right after. */
		/* Room was checked above; only KVD_REF_MAX can refuse: the
		 * block then stays the caller's, uncommitted (flags 0). */
		if (hold_get(ns, hr, have))
			continue;
		hold_put(ns, hr, e[i].id);
		e[i].id = have;
		e[i].flags = KV_COMMIT_DEDUP;
	}
	return (int)nr;
}

#define RELEASE_AHEAD	8	/* blocks prefetched ahead of a RELEASE */

/*
 * kvd_ns_release - drop one ref per entry of @ids (a private copy: the
 * caller copied it out of shared memory). An id may appear as often as
 * the client holds it. All or nothing: -EINVAL for an id outside the
 * namespace, -EPERM for one the client does not hold (often enough).
 * Pass 1 takes the counts down and undoes on error; pass 2 frees.
 */
int kvd_ns_release(struct kvd_ns *ns, struct kvd_holder *hr,
		   const uint32_t *ids, uint32_t nr)
{
	uint32_t i, *c;
	int ret;

	if (!nr)
		return -EINVAL;
	for (i = 0; i < nr; i++) {
		/* ids are anywhere in the pool: start the misses early */
		if (i + RELEASE_AHEAD < nr &&
		    ids[i + RELEASE_AHEAD] < ns->max_blocks)
			__builtin_prefetch(&ns->blocks[ids[i + RELEASE_AHEAD]]);
		ret = -EINVAL;
		if (ids[i] >= ns->max_blocks)
			goto err_undo;
		ret = -EPERM;
		c = kvd_hold_counter(ns, hr->slot, ids[i]);
		if (!c || *c == 0)
			goto err_undo;
		(*c)--;
	}
	for (i = 0; i < nr; i++) {
		c = kvd_hold_counter(ns, hr->slot, ids[i]);
		if (c && *c == 0)
			kvd_hold_del(ns, hr, ids[i]);
		hr->nr_refs--;
		block_put(ns, ids[i]);
	}
	return (int)nr;

err_undo:
	while (i--)
		(*kvd_hold_counter(ns, hr->slot, ids[i]))++;
	return ret;
}

/*
 * kvd_ns_ref - take one more ref on each held block (fork). The caller
 * must hold every id: -EINVAL outside the namespace, -EPERM not held,
 * -EOVERFLOW at 2^32 - 1 refs. All or nothing.
 */
int kvd_ns_ref(struct kvd_ns *ns, struct kvd_holder *hr, const uint32_t *ids,
	       uint32_t nr)
{
	uint32_t i;

	if (!nr)
		return -EINVAL;
	for (i = 0; i < nr; i++) {
		if (ids[i] >= ns->max_blocks)
			return -EINVAL;
		if (!kvd_hold_counter(ns, hr->slot, ids[i]))
			return -EPERM;
		if (ns->blocks[ids[i]].ref > KVD_REF_MAX - nr)
			return -EOVERFLOW;
	}
	if (!kvd_holder_room(hr, nr))
		return -EDQUOT;
	for (i = 0; i < nr; i++) {
		(*kvd_hold_counter(ns, hr->slot, ids[i]))++;
		ns->blocks[ids[i]].ref++;
		hr->nr_refs++;
	}
	return (int)nr;
}

/* Must a holder copy @b before writing it? Others hold it, or it is in
 * the prefix cache's index (later hits expect its bytes unchanged). */
static bool cow_needed(const struct kvd_block *b)
{
	return b->ref > 1 || b->committed;
}

/*
 * kvd_ns_cow_begin - CoW, step one: for each held block in @ids that
 * @hr must not write in place (cow_needed), allocate a new block held by
 * @hr; @dst[i] gets it, or KVD_NIL where ids[i] may be written as is.
 * Returns the number of new blocks (0..nr). All or nothing: -EINVAL an
 * id outside the namespace or given twice, -EPERM not held, -ENOSPC /
 * -ENOMEM / -EDQUOT no room for the copies (nothing changed). The
 * caller copies the bytes, then calls kvd_ns_cow_end (vLLM's block
 * manager does the same swap of a shared block for a private copy before
 * appending to it).
 */
int kvd_ns_cow_begin(struct kvd_ns *ns, struct kvd_holder *hr,
		     const uint32_t *ids, uint32_t *dst, uint32_t nr)
{
	uint32_t i, j, k = 0;
	int ret = 0;

	if (!nr)
		return -EINVAL;
	for (i = 0; i < nr && !ret; i++) {
		if (ids[i] >= ns->max_blocks || ns->blocks[ids[i]].mark)
			ret = -EINVAL;
		else if (!kvd_hold_counter(ns, hr->slot, ids[i]))
			ret = -EPERM;
		else
			ns->blocks[ids[i]].mark = true;
	}
	for (j = 0; j < i; j++)
		if (ids[j] < ns->max_blocks)
			ns->blocks[ids[j]].mark = false;
	if (ret)
		return ret;
	for (i = 0; i < nr; i++)
		k += cow_needed(&ns->blocks[ids[i]]);
	if (!k)
		goto spread;
	if (ns->holds.cap - ns->holds.nr < k)
		return -ENOMEM;
	/* marked: kvd_ns_cow_end may still have to undo them */
	ret = alloc_ids_marked(ns, hr, dst, k);
	if (ret < 0)
		return ret;
spread:
	/* dst[0..k) -> the slots that need them; j <= i throughout. */
	for (i = nr, j = k; i--;)
		dst[i] = cow_needed(&ns->blocks[ids[i]]) ? dst[--j] : KVD_NIL;
	return (int)k;
}

/*
 * kvd_ns_cow_end - step two: @copied, the old blocks' refs go and @ids
 * take the new ids; else the new blocks are undone, last first (blocks
 * evicted for them back in the cache), and nothing changed.
 */
void kvd_ns_cow_end(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		    const uint32_t *dst, uint32_t nr, bool copied)
{
	uint64_t frees = ns->pool->frees;

	if (!copied) {
		for (uint32_t i = nr; i--;)
			if (dst[i] != KVD_NIL)
				block_unalloc(ns, hr, dst[i]);
		ns->pool->frees = frees;	/* nothing new is free */
		return;
	}
	alloc_done(ns, dst, nr);
	for (uint32_t i = 0; i < nr; i++) {
		if (dst[i] == KVD_NIL)
			continue;
		hold_put(ns, hr, ids[i]);
		ids[i] = dst[i];
	}
}

/* All @count refs of @hr on @block go at once. */
static void hold_drop_all(struct kvd_ns *ns, struct kvd_holder *hr,
			  uint32_t block, uint32_t count)
{
	kvd_hold_del(ns, hr, block);
	hr->nr_refs -= count;
	kvd_warn_on_once(ns->blocks[block].ref < count);
	ns->blocks[block].ref -= count - 1;
	block_put(ns, block);
}

/* Client gone: drop every ref it held, freeing what nobody else holds. */
void kvd_ns_release_all(struct kvd_ns *ns, struct kvd_holder *hr)
{
	struct kvd_holds *hs = &ns->holds;

	while (hr->head != KVD_NIL) {
		uint32_t i = hr->head;

		hold_drop_all(ns, hr, hs->nodes[i].block, hs->nodes[i].count);
	}
	while (hr->own_head != KVD_NIL) {
		uint32_t id = hr->own_head;

		hold_drop_all(ns, hr, id, ns->blocks[id].own_refs);
	}
}
