// SPDX-License-Identifier: MIT
/*
 * Namespaces, slabs, blocks and holds.
 *
 * A namespace owns the slabs of one geometry. A slab is a run of pages
 * whose start and length are multiples of lcm(page, block_bytes), so a
 * block id is a plain index (offset / block_bytes) and slabs have no tail
 * waste (DESIGN.md). Where that lcm is huge (odd block sizes) a slab is a
 * run of plain pages long enough that the partial blocks at its two ends
 * waste under 2% (see ns_slab_geometry()).
 *
 * Blocks are carved lazily: a new slab hands out first_block + nr_carved
 * until all were seen, then its free list; so creating a slab is O(1).
 * A slab whose blocks are all free goes back to the page pool at once.
 *
 * Holds record which client holds how many refs on which block. A block's
 * ref count is the sum of its holds' counts; a client can only release or
 * ref blocks it holds, and all its holds are dropped when it dies.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ns.h"

#define KVD_SLAB_MAX_LCM_PAGES	64	/* beyond: plain-page slabs */
#define KVD_SLAB_WASTE_PCT	2

/*
 * Pages in a slab of @bb-byte blocks: lcm(page, bb) when that is at most
 * 64 pages (no waste); else plain pages, enough that the partial blocks
 * at both ends (< 2 blocks) waste under 2%.
 */
static uint64_t slab_pages_for(uint64_t bb)
{
	uint64_t lcm = KV_PAGE_BYTES / kvd_gcd(KV_PAGE_BYTES, bb) * bb;

	/* lcm == bb: whole pages per block, one block a slab, no waste */
	if (lcm / KV_PAGE_BYTES <= KVD_SLAB_MAX_LCM_PAGES || lcm == bb)
		return lcm / KV_PAGE_BYTES;
	return (2 * 100 / KVD_SLAB_WASTE_PCT * bb + KV_PAGE_BYTES - 1) /
	       KV_PAGE_BYTES;
}

int kvd_geometry_check(const struct kv_geometry *g, uint64_t pool_bytes,
		       const char **why)
{
	uint64_t bb;

	if (!g->layers || !g->kv_heads || !g->head_dim || !g->block_tokens) {
		*why = "geometry counts must be >= 1";
		return -EINVAL;
	}
	if (g->layers > 1024 || g->kv_heads > 1024 || g->head_dim > 1024 ||
	    g->block_tokens > 1024) {
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
	if (slab_pages_for(bb) * KV_PAGE_BYTES > pool_bytes) {
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

static void ns_slab_geometry(struct kvd_ns *ns)
{
	uint64_t bb = ns->block_bytes;
	uint64_t lcm = KV_PAGE_BYTES / kvd_gcd(KV_PAGE_BYTES, bb) * bb;

	ns->slab_pages = slab_pages_for(bb);
	ns->slab_align = lcm / KV_PAGE_BYTES == ns->slab_pages ?
			 ns->slab_pages : 1;
}

/*
 * Nothing here is touched at creation: calloc'd arrays stay untouched
 * zero pages until used, buckets hold node + 1 (0 = empty), and nodes
 * are handed out below a watermark before the free list is used. So a
 * namespace on a huge pool costs nothing until it holds blocks.
 */
static int holds_init(struct kvd_holds *hs, uint32_t cap)
{
	uint64_t nb = 1;

	while (nb < cap)
		nb <<= 1;
	hs->nodes = calloc(cap, sizeof(*hs->nodes));
	hs->buckets = calloc(nb, sizeof(*hs->buckets));
	if (!hs->nodes || !hs->buckets)
		return -ENOMEM;
	hs->mask = (uint32_t)(nb - 1);
	hs->cap = cap;
	hs->nr = 0;
	hs->used = 0;
	hs->free_head = KVD_NIL;
	return 0;
}

int kvd_ns_init(struct kvd_ns *ns, struct kvd_pool *pool, uint32_t id,
		const char *model_id, const char *model_rev,
		const struct kv_geometry *g, uint32_t tenant, uint64_t seed)
{
	int ret;

	memset(ns, 0, sizeof(*ns));
	ns->id = id;
	ns->tenant = tenant;
	ns->seed = seed;
	ns->pool = pool;
	ns->geom = *g;
	snprintf(ns->model_id, sizeof(ns->model_id), "%s", model_id);
	snprintf(ns->model_rev, sizeof(ns->model_rev), "%s", model_rev);
	ns->block_bytes = kv_geometry_block_bytes(g);
	if (pool->bytes / ns->block_bytes > KVD_NS_MAX_BLOCKS)
		return -E2BIG;
	ns->max_blocks = (uint32_t)(pool->bytes / ns->block_bytes);
	ns_slab_geometry(ns);
	ns->slab_bytes = (uint64_t)ns->slab_pages * KV_PAGE_BYTES;
	if (ns->slab_pages > pool->nr_pages)
		return -E2BIG;
	ns->max_slabs = pool->nr_pages / ns->slab_pages;
	ns->blocks = calloc(ns->max_blocks, sizeof(*ns->blocks));
	ns->slabs = calloc(ns->max_slabs, sizeof(*ns->slabs));
	ret = -ENOMEM;
	if (!ns->blocks || !ns->slabs)
		goto err_free;
	/* Each block has one holder mostly; shared ones more (fork, REF). */
	/* Shared prefixes give one block many holders: room for that. */
	/* Owners count in the block; the table is for other holders of
	 * shared blocks: many engines on one long system prompt, even on a
	 * pool of few blocks (memory untouched until used). */
	ret = holds_init(&ns->holds, 4 * ns->max_blocks + 65536);
	if (ret)
		goto err_free;
	ret = kvd_prefix_init(ns);
	if (ret)
		goto err_free;
	ns->free_slab = KVD_NIL;	/* then slots_used++ (see holds_init) */
	ns->partial = KVD_NIL;
	ns->live = true;
	ns->pool->nr_live_ns++;
	return 0;

err_free:
	kvd_ns_exit(ns);
	return ret;
}

void kvd_ns_exit(struct kvd_ns *ns)
{
	if (ns->live)
		ns->pool->nr_live_ns--;
	for (uint32_t i = 0; ns->slabs && i < ns->max_slabs; i++)
		if (ns->slabs[i].live)
			kvd_pool_free_run(ns->pool, ns->slabs[i].first_page,
					  ns->slab_pages);
	free(ns->blocks);
	free(ns->slabs);
	free(ns->holds.nodes);
	free(ns->holds.buckets);
	kvd_prefix_exit(ns);
	memset(ns, 0, sizeof(*ns));
}

/* ---- slabs ---- */

static void partial_add(struct kvd_ns *ns, uint32_t s)
{
	struct kvd_slab *slab = &ns->slabs[s];

	slab->prev = KVD_NIL;
	slab->next = ns->partial;
	if (ns->partial != KVD_NIL)
		ns->slabs[ns->partial].prev = s;
	ns->partial = s;
}

static void partial_del(struct kvd_ns *ns, uint32_t s)
{
	struct kvd_slab *slab = &ns->slabs[s];

	if (slab->prev != KVD_NIL)
		ns->slabs[slab->prev].next = slab->next;
	else
		ns->partial = slab->next;
	if (slab->next != KVD_NIL)
		ns->slabs[slab->next].prev = slab->prev;
}

static bool over_quota(const struct kvd_acct *a, uint32_t more)
{
	return a->max_pages && a->pages + more > a->max_pages;
}

/* Can @ns give up @pages without going below its or its tenant's min? */
bool kvd_ns_reclaimable(const struct kvd_ns *ns, uint32_t pages)
{
	if (ns->acct.pages < ns->acct.min_pages + pages)
		return false;
	return !ns->tacct || ns->tacct->pages >= ns->tacct->min_pages + pages;
}

static int slab_new(struct kvd_ns *ns)
{
	uint64_t start, end;
	struct kvd_slab *slab;
	int64_t page;
	uint32_t s;

	if (ns->free_slab == KVD_NIL && ns->slab_slots_used == ns->max_slabs)
		return -ENOSPC;
	if (over_quota(&ns->acct, ns->slab_pages) ||
	    (ns->tacct && over_quota(ns->tacct, ns->slab_pages)))
		return -EDQUOT;
	page = kvd_pool_alloc_run_for(ns->pool, ns->slab_pages, ns->slab_align,
				      (int32_t)ns->tenant);
	if (page < 0)
		return (int)page;
	if (ns->free_slab != KVD_NIL) {
		s = ns->free_slab;
		ns->free_slab = ns->slabs[s].next;
	} else {
		s = ns->slab_slots_used++;
	}
	slab = &ns->slabs[s];

	start = (uint64_t)page * KV_PAGE_BYTES;
	end = start + ns->slab_bytes;
	slab->first_page = (uint32_t)page;
	slab->first_block = (start + ns->block_bytes - 1) / ns->block_bytes;
	slab->nr_blocks = end / ns->block_bytes - slab->first_block;
	slab->nr_free = slab->nr_blocks;
	slab->nr_carved = 0;
	slab->free_head = KVD_NIL;
	slab->live = true;
	ns->nr_slabs++;
	ns->nr_blocks += slab->nr_blocks;
	ns->acct.pages += ns->slab_pages;
	if (ns->tacct)
		ns->tacct->pages += ns->slab_pages;
	partial_add(ns, s);
	return (int)s;
}

/* Give a wholly free slab's pages back to the pool. */
static void slab_put(struct kvd_ns *ns, uint32_t s)
{
	struct kvd_slab *slab = &ns->slabs[s];

	for (uint32_t i = 0; i < slab->nr_carved; i++)
		ns->blocks[slab->first_block + i].state = KVD_BLOCK_NONE;
	partial_del(ns, s);
	kvd_pool_free_run(ns->pool, slab->first_page, ns->slab_pages);
	ns->nr_slabs--;
	ns->nr_blocks -= slab->nr_blocks;
	ns->acct.pages -= ns->slab_pages;
	if (ns->tacct)
		ns->tacct->pages -= ns->slab_pages;
	slab->live = false;
	slab->next = ns->free_slab;
	ns->free_slab = s;
}

/*
 * A new block with one ref: free blocks first (a slab's free list, then a
 * new slab from the page pool), then the least recently used cached leaf
 * is evicted (kvd/prefix.c). -ENOSPC only when nothing is evictable.
 */
static int block_alloc(struct kvd_ns *ns, uint32_t *id)
{
	struct kvd_slab *slab;
	struct kvd_block *b;
	uint32_t s = ns->partial;
	int ret;

	if (s == KVD_NIL) {
		ret = slab_new(ns);
		/* Out of pages: reclaim from the coldest namespace, which
		 * may be this one (its LRU leaf is then reused at once). */
		while (ret == -ENOSPC && kvd_prefix_reclaim(ns) > 0)
			ret = slab_new(ns);
		if ((ret == -ENOSPC || ret == -EDQUOT) &&
		    !kvd_prefix_evict_one(ns, id)) {
			b = &ns->blocks[*id];
			b->ref = 1;
			b->state = KVD_BLOCK_HELD;
			ns->blocks_used++;
			return 0;
		}
		if (ret < 0)
			return ret;
		s = (uint32_t)ret;
	}
	slab = &ns->slabs[s];
	if (slab->free_head != KVD_NIL) {
		*id = slab->free_head;
		slab->free_head = ns->blocks[*id].next_free;
	} else {
		*id = slab->first_block + slab->nr_carved++;
	}
	if (--slab->nr_free == 0)
		partial_del(ns, s);
	b = &ns->blocks[*id];
	b->ref = 1;
	b->slab = s;
	b->state = KVD_BLOCK_HELD;
	ns->blocks_used++;
	return 0;
}

/* Ref 0 and not cached: back on its slab's free list. */
void __kvd_block_free(struct kvd_ns *ns, uint32_t id)
{
	ns->pool->frees++;
	struct kvd_block *b = &ns->blocks[id];
	struct kvd_slab *slab = &ns->slabs[b->slab];

	b->state = KVD_BLOCK_FREE;
	b->next_free = slab->free_head;
	slab->free_head = id;
	if (slab->nr_free++ == 0)
		partial_add(ns, b->slab);
	if (slab->nr_free == slab->nr_blocks)
		slab_put(ns, b->slab);
}

/* ---- holds ---- */

_Static_assert(sizeof(struct kvd_block) == 64, "a block's books: one line");

static inline uint32_t hold_hash(const struct kvd_holds *hs, uint32_t client,
				 uint32_t block)
{
	uint64_t k = ((uint64_t)client << 32 | block) * 0x9e3779b97f4a7c15ULL;

	return (uint32_t)(k >> 32) & hs->mask;
}

/* The hash node of (@client, @block), KVD_NIL if none: non-owners only. */
static uint32_t hash_find(const struct kvd_holds *hs, uint32_t client,
			  uint32_t block)
{
	uint32_t i = hs->buckets[hold_hash(hs, client, block)];

	while (i) {
		const struct kvd_hold *h = &hs->nodes[i - 1];

		if (h->block == block && h->client == client)
			return i - 1;
		i = h->hnext;
	}
	return KVD_NIL;
}

static void hash_add(struct kvd_holds *hs, struct kvd_holder *hr,
		     uint32_t block)
{
	uint32_t i, b = hold_hash(hs, hr->slot, block);
	struct kvd_hold *h;

	if (hs->free_head != KVD_NIL) {
		i = hs->free_head;
		hs->free_head = hs->nodes[i].hnext;
	} else {
		i = hs->used++;
	}
	h = &hs->nodes[i];
	hs->nr++;
	h->block = block;
	h->client = hr->slot;
	h->count = 1;
	h->hnext = hs->buckets[b];	/* chain links are node + 1 too */
	hs->buckets[b] = i + 1;
	h->cprev = KVD_NIL;
	h->cnext = hr->head;
	if (hr->head != KVD_NIL)
		hs->nodes[hr->head].cprev = i;
	hr->head = i;
}

static void hash_del(struct kvd_holds *hs, struct kvd_holder *hr, uint32_t i)
{
	struct kvd_hold *h = &hs->nodes[i];
	uint32_t *pp = &hs->buckets[hold_hash(hs, h->client, h->block)];

	while (*pp != i + 1)
		pp = &hs->nodes[*pp - 1].hnext;
	*pp = h->hnext;
	if (h->cprev != KVD_NIL)
		hs->nodes[h->cprev].cnext = h->cnext;
	else
		hr->head = h->cnext;
	if (h->cnext != KVD_NIL)
		hs->nodes[h->cnext].cprev = h->cprev;
	h->hnext = hs->free_head;
	hs->free_head = i;
	hs->nr--;
}

/*
 * Where @client's refs on @block are counted: the block itself when the
 * client owns it, else its hash node. NULL when it holds none.
 */
static uint32_t *hold_count(const struct kvd_ns *ns, uint32_t client,
			    uint32_t block)
{
	struct kvd_block *b = &ns->blocks[block];
	uint32_t i;

	if (b->owner == client + 1)
		return &b->own_refs;
	i = hash_find(&ns->holds, client, block);
	return i == KVD_NIL ? NULL : &ns->holds.nodes[i].count;
}

uint32_t kvd_ns_hold_count(const struct kvd_ns *ns, uint32_t client,
			   uint32_t block)
{
	const uint32_t *c = hold_count(ns, client, block);

	return c ? *c : 0;
}

/*
 * A first ref on @block for @hr, which holds none of it yet; the block is
 * off the LRU (its links become the owner's). It takes ownership when the
 * block has no owner, else a hash node.
 */
static void hold_add(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block)
{
	struct kvd_block *b = &ns->blocks[block];

	hr->nr_blocks++;
	hr->nr_refs++;
	if (b->owner) {
		hash_add(&ns->holds, hr, block);
		return;
	}
	b->owner = hr->slot + 1;
	b->own_refs = 1;
	b->own_prev = KVD_NIL;
	b->own_next = hr->own_head;
	if (hr->own_head != KVD_NIL)
		ns->blocks[hr->own_head].own_prev = block;
	hr->own_head = block;
	ns->holds.owned++;
}

/* @hr's count on @block reached 0: forget the hold (refs untouched). */
static void hold_del(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block)
{
	struct kvd_block *b = &ns->blocks[block];

	hr->nr_blocks--;
	if (b->owner != hr->slot + 1) {
		hash_del(&ns->holds, hr, hash_find(&ns->holds, hr->slot, block));
		return;
	}
	if (b->own_prev != KVD_NIL)
		ns->blocks[b->own_prev].own_next = b->own_next;
	else
		hr->own_head = b->own_next;
	if (b->own_next != KVD_NIL)
		ns->blocks[b->own_next].own_prev = b->own_prev;
	b->owner = 0;
	ns->holds.owned--;
}

/*
 * One more ref on @id for @hr, which may or may not hold it already.
 * -EOVERFLOW at KVD_REF_MAX refs (far below 2^32: nothing ever wraps),
 * -ENOMEM when the hold table is full.
 */
int __kvd_hold_get(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];
	uint32_t *c = NULL;

	if (b->ref >= KVD_REF_MAX)
		return -EOVERFLOW;
	/* Only the owner holds it (ref == own_refs): no hash lookup. */
	if (b->owner == hr->slot + 1 || (b->ref && !(b->owner &&
					 b->ref == b->own_refs)))
		c = hold_count(ns, hr->slot, id);
	if (c) {
		(*c)++;
		hr->nr_refs++;
		kvd_block_get(ns, id);
		return 0;
	}
	if (b->owner && ns->holds.nr >= ns->holds.cap)
		return -ENOMEM;
	kvd_block_get(ns, id);		/* off the LRU before the links move */
	hold_add(ns, hr, id);
	return 0;
}

/* One ref less on @id, which @hr holds (checked by the caller). */
void __kvd_hold_put(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id)
{
	if (--*hold_count(ns, hr->slot, id) == 0)
		hold_del(ns, hr, id);
	hr->nr_refs--;
	kvd_block_put(ns, id);
}

/* A hold node in use (not on the free list): the index can find it. */
bool __kvd_hold_live(const struct kvd_ns *ns, uint32_t node)
{
	const struct kvd_hold *h = &ns->holds.nodes[node];

	return hash_find(&ns->holds, h->client, h->block) == node;
}

void kvd_holder_init(struct kvd_holder *h, uint32_t slot)
{
	h->slot = slot;
	h->head = KVD_NIL;
	h->own_head = KVD_NIL;
	h->nr_blocks = 0;
	h->nr_refs = 0;
	h->max_refs = 0;
}

/* ---- operations ---- */

/* One more ref; a cached block leaves the cache (and the LRU). */
void kvd_block_get(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (b->ref++ == 0) {
		kvd_warn_on_once(b->state != KVD_BLOCK_CACHED);
		kvd_prefix_uncache(ns, id);
		b->state = KVD_BLOCK_HELD;
		ns->blocks_used++;
	}
}

/* One ref less; at 0 a committed block is cached, any other freed. */
void kvd_block_put(struct kvd_ns *ns, uint32_t id)
{
	struct kvd_block *b = &ns->blocks[id];

	if (--b->ref)
		return;
	ns->blocks_used--;
	if (b->committed)
		kvd_prefix_cache(ns, id);
	else
		__kvd_block_free(ns, id);
}


/*
 * kvd_ns_alloc - @nr new blocks, each with one ref held by @hr; ids
 * written to @ids. All or nothing: -ENOSPC leaves the books unchanged,
 * -ENOMEM when the hold table is full, -E2BIG when nr exceeds max_blocks.
 */
int kvd_ns_alloc(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		 uint32_t nr)
{
	int ret = kvd_ns_alloc_check(ns, hr, nr);

	return ret ? ret : __kvd_ns_alloc_ids(ns, hr, ids, nr);
}

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
 * Can @nr more blocks still be had: free in our slabs, in free pages (in
 * whole slabs of this geometry), then in other namespaces' slabs that
 * would come back as pages once their cached blocks are evicted (their
 * blocks not in use, down to their guaranteed minimum)? An estimate; a
 * failing ALLOC still unwinds. The scan of other namespaces runs only
 * when the pool itself is short, off the common path.
 */
static bool has_room(const struct kvd_ns *ns, uint32_t nr)
{
	uint64_t free_pages = ns->pool->nr_pages - ns->pool->pages_used;
	uint64_t bytes, have;

	free_pages -= free_pages % ns->slab_pages;
	bytes = free_pages * KV_PAGE_BYTES;
	have = (uint64_t)ns->nr_blocks - ns->blocks_used;
	if (have + bytes / ns->block_bytes >= nr)
		return true;
	for (uint32_t i = 0; ns->pool->ns && i < ns->pool->nr_ns; i++) {
		const struct kvd_ns *o = &ns->pool->ns[i];
		uint64_t spare, room;

		if (!o->live || o == ns || !o->cached_blocks)
			continue;
		spare = (uint64_t)(o->nr_blocks - o->blocks_used) * o->block_bytes;
		room = o->acct.pages > o->acct.min_pages ?
		       (uint64_t)(o->acct.pages - o->acct.min_pages) *
		       KV_PAGE_BYTES : 0;
		bytes += spare < room ? spare : room;
	}
	return have + bytes / ns->block_bytes >= nr;
}

/* Checked by the caller: @nr blocks for @hr, all or nothing. */
int __kvd_ns_alloc_ids(struct kvd_ns *ns, struct kvd_holder *hr,
		       uint32_t *ids, uint32_t nr)
{
	uint32_t i, id;
	int ret;

	/* Cheap refusal first, so a hopeless ALLOC evicts nothing. */
	if (!has_room(ns, nr))
		return -ENOSPC;
	for (i = 0; i < nr; i++) {
		ret = block_alloc(ns, &id);
		if (ret)
			goto err_unwind;
		hold_add(ns, hr, id);
		ids[i] = id;
	}
	return (int)nr;

err_unwind:
	while (i--) {
		hold_del(ns, hr, ids[i]);
		hr->nr_refs--;
		kvd_block_put(ns, ids[i]);
	}
	return ret;
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
		c = hold_count(ns, hr->slot, ids[i]);
		if (!c || *c == 0)
			goto err_undo;
		(*c)--;
	}
	for (i = 0; i < nr; i++) {
		c = hold_count(ns, hr->slot, ids[i]);
		if (c && *c == 0)
			hold_del(ns, hr, ids[i]);
		hr->nr_refs--;
		kvd_block_put(ns, ids[i]);
	}
	return (int)nr;

err_undo:
	while (i--)
		(*hold_count(ns, hr->slot, ids[i]))++;
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
		if (!hold_count(ns, hr->slot, ids[i]))
			return -EPERM;
		if (ns->blocks[ids[i]].ref > KVD_REF_MAX - nr)
			return -EOVERFLOW;
	}
	if (!kvd_holder_room(hr, nr))
		return -EDQUOT;
	for (i = 0; i < nr; i++) {
		(*hold_count(ns, hr->slot, ids[i]))++;
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
 * -ENOMEM / -EDQUOT no room for the copies. The caller copies the bytes,
 * then calls kvd_ns_cow_end (vLLM's block manager does the same swap of
 * a shared block for a private copy before appending to it).
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
		else if (!hold_count(ns, hr->slot, ids[i]))
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
	ret = __kvd_ns_alloc_ids(ns, hr, dst, k);
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
 * take the new ids; else the new blocks go and nothing changed.
 */
void kvd_ns_cow_end(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		    const uint32_t *dst, uint32_t nr, bool copied)
{
	for (uint32_t i = 0; i < nr; i++) {
		if (dst[i] == KVD_NIL)
			continue;
		__kvd_hold_put(ns, hr, copied ? ids[i] : dst[i]);
		if (copied)
			ids[i] = dst[i];
	}
}

/* All @count refs of @hr on @block go at once. */
static void hold_drop_all(struct kvd_ns *ns, struct kvd_holder *hr,
			  uint32_t block, uint32_t count)
{
	hold_del(ns, hr, block);
	hr->nr_refs -= count;
	kvd_warn_on_once(ns->blocks[block].ref < count);
	ns->blocks[block].ref -= count - 1;
	kvd_block_put(ns, block);
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
