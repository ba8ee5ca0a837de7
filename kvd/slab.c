// SPDX-License-Identifier: MIT
/*
 * Slabs of one namespace, over the page pool: a slab is a run of pages
 * whose start and length are multiples of lcm(page, block_bytes), so a
 * block id is a plain index (offset / block_bytes) and slabs have no tail
 * waste (DESIGN.md). Where that lcm is huge (odd block sizes) a slab is a
 * run of plain pages long enough that the partial blocks at its two ends
 * waste under 2% (see kvd_slab_pages_for()).
 *
 * Blocks are carved lazily: a new slab hands out first_block + nr_carved
 * until all were seen, then its free list; so creating a slab is O(1).
 * A slab whose blocks are all free goes back to the page pool at once.
 * Calls nothing but pool.c; what to do when no slab can be had (reclaim,
 * evict) is for ns.c to decide from the -errno returned.
 */
#include <errno.h>
#include <stdlib.h>

#include "ns_internal.h"

#define KVD_SLAB_MAX_LCM_PAGES	64	/* beyond: plain-page slabs */
#define KVD_SLAB_WASTE_PCT	2

/*
 * Pages in a slab of @bb-byte blocks: lcm(page, bb) when that is at most
 * 64 pages (no waste); else plain pages, enough that the partial blocks
 * at both ends (< 2 blocks) waste under 2%.
 */
uint64_t kvd_slab_pages_for(uint64_t bb)
{
	uint64_t lcm = KV_PAGE_BYTES / kvd_gcd(KV_PAGE_BYTES, bb) * bb;

	/* lcm == bb: whole pages per block, one block a slab, no waste */
	if (lcm / KV_PAGE_BYTES <= KVD_SLAB_MAX_LCM_PAGES || lcm == bb)
		return lcm / KV_PAGE_BYTES;
	return (2 * 100 / KVD_SLAB_WASTE_PCT * bb + KV_PAGE_BYTES - 1) /
	       KV_PAGE_BYTES;
}

/* Slab size and alignment of @ns (block_bytes set); -E2BIG past the pool. */
int kvd_slab_geometry(struct kvd_ns *ns)
{
	uint64_t bb = ns->block_bytes;
	uint64_t lcm = KV_PAGE_BYTES / kvd_gcd(KV_PAGE_BYTES, bb) * bb;

	ns->slab_pages = kvd_slab_pages_for(bb);
	ns->slab_align = lcm / KV_PAGE_BYTES == ns->slab_pages ?
			 ns->slab_pages : 1;
	ns->slab_bytes = (uint64_t)ns->slab_pages * KV_PAGE_BYTES;
	if (ns->slab_pages > ns->pool->nr_pages)
		return -E2BIG;
	ns->max_slabs = ns->pool->nr_pages / ns->slab_pages;
	return 0;
}

/* The slab slots (calloc'd: untouched until used). */
int kvd_slab_init(struct kvd_ns *ns)
{
	ns->slabs = calloc(ns->max_slabs, sizeof(*ns->slabs));
	if (!ns->slabs)
		return -ENOMEM;
	ns->free_slab = KVD_NIL;	/* then slots_used++ (see hold.c) */
	ns->partial = KVD_NIL;
	return 0;
}

/* Every live slab's pages back to the pool, and the slots freed. */
void kvd_slab_exit(struct kvd_ns *ns)
{
	for (uint32_t i = 0; ns->slabs && i < ns->max_slabs; i++)
		if (ns->slabs[i].live)
			kvd_pool_free_run(ns->pool, ns->slabs[i].first_page,
					  ns->slab_pages);
	free(ns->slabs);
	ns->slabs = NULL;
}

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

/*
 * kvd_slab_new - a new slab from the page pool, first on the partial
 * list. Returns its index, or -ENOSPC (no slot or no pages), -EDQUOT
 * (the namespace's or tenant's max_pages).
 */
int kvd_slab_new(struct kvd_ns *ns)
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
	slab->nr_held = slab->nr_out = 0;
	slab->tick = 0;
	slab->live = true;
	ns->nr_slabs++;
	ns->nr_blocks += slab->nr_blocks;
	kvd_acct_charge(&ns->acct, ns->slab_pages);
	if (ns->tacct)
		kvd_acct_charge(ns->tacct, ns->slab_pages);
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
 * kvd_slab_carve - a block of the first partial slab (the caller made
 * sure there is one): its free list first, else the next never carved.
 * Returns the id, with its slab set; ref and state are the caller's.
 */
uint32_t kvd_slab_carve(struct kvd_ns *ns)
{
	uint32_t s = ns->partial, id;
	struct kvd_slab *slab = &ns->slabs[s];

	if (slab->free_head != KVD_NIL) {
		id = slab->free_head;
		slab->free_head = ns->blocks[id].next_free;
	} else {
		id = slab->first_block + slab->nr_carved++;
	}
	if (--slab->nr_free == 0)
		partial_del(ns, s);
	ns->blocks[id].slab = s;
	return id;
}

/* Ref 0 and not cached: back on its slab's free list. */
void kvd_slab_free_block(struct kvd_ns *ns, uint32_t id)
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
