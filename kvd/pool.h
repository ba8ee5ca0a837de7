/* SPDX-License-Identifier: MIT */
/*
 * The page pool: the pool's memory in 2 MiB pages, handed out as aligned
 * runs to slabs. Books only; where the bytes live is the backend's.
 */
#ifndef KVD_POOL_H
#define KVD_POOL_H

#include "kvd.h"

struct kvd_ns;

struct kvd_pool {
	uint64_t	bytes;		/* nr_pages * KV_PAGE_BYTES */
	uint32_t	nr_pages;
	uint32_t	pages_used;
	uint32_t	peak_pages_used;
	uint32_t	pinned_pages;	/* of slabs with a pinned block (retain.c) */
	unsigned long	*used;		/* bitmap, 1 = page belongs to a slab */
	/*
	 * Extents: the pool in runs of extent_pages, each owned by one
	 * tenant while any of its pages is in use (nr_extents 0: one
	 * extent, no owners). on_claim runs when an extent changes owner.
	 */
	uint32_t	extent_pages;
	uint32_t	nr_extents;
	int32_t		*ext_owner;	/* tenant, KVD_EXT_FREE when unused */
	int32_t		*ext_last;	/* the tenant that last held it */
	uint32_t	*ext_used;	/* pages in use */
	int		(*on_claim)(struct kvd_pool *pool, uint32_t ext,
				    int32_t owner);
	/* a committed block of @ns leaves the cache for reuse, its bytes
	 * still in place and @key its index key: the tiers take it in
	 * (kvd/tier.c); NULL: it is dropped */
	void		(*on_evict)(struct kvd_pool *pool, struct kvd_ns *ns,
				    uint32_t id, const struct kv_hash *key);
	/* KV events (kvd/events.c): block @id of @ns committed under the
	 * engine's hash @h, child of @parent; or it left the pool. NULL:
	 * no events */
	void		(*on_stored)(struct kvd_pool *pool, struct kvd_ns *ns,
				     uint32_t id, const struct kv_hash *h,
				     const struct kv_hash *parent);
	void		(*on_removed)(struct kvd_pool *pool, struct kvd_ns *ns,
				      uint32_t id);
	void		*priv;
	/* every namespace slot, for reclaim across them (NULL: none) */
	struct kvd_ns	*ns;
	uint32_t	nr_ns;
	uint64_t	clock;		/* ticks of cache use, for coldness */
	uint64_t	reclaims;	/* blocks evicted for another namespace */
	uint64_t	frees;		/* blocks freed or cached: waiters retry */
	uint32_t	nr_live_ns;	/* live namespaces on this pool */
};

int kvd_pool_init(struct kvd_pool *pool, uint32_t nr_pages);
void kvd_pool_exit(struct kvd_pool *pool);
#define KVD_EXT_FREE	(-1)
#define KVD_EXT_ANY	(-2)	/* owner argument: ignore ownership */
#define KVD_EXT_GONE	(-3)	/* ext_last: a tenant whose slot was reused */

int kvd_pool_set_extents(struct kvd_pool *pool, uint32_t extent_pages);
int64_t kvd_pool_alloc_run(struct kvd_pool *pool, uint32_t nr, uint32_t align);
int64_t kvd_pool_alloc_run_for(struct kvd_pool *pool, uint32_t nr,
			       uint32_t align, int32_t owner);
void kvd_pool_free_run(struct kvd_pool *pool, uint32_t first, uint32_t nr);
bool kvd_pool_page_used(const struct kvd_pool *pool, uint32_t page);

#endif /* KVD_POOL_H */
