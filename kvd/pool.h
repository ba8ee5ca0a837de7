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
	unsigned long	*used;		/* bitmap, 1 = page belongs to a slab */
	/* every namespace slot, for reclaim across them (NULL: none) */
	struct kvd_ns	*ns;
	uint32_t	nr_ns;
	uint64_t	clock;		/* ticks of cache use, for coldness */
	uint64_t	reclaims;	/* blocks evicted for another namespace */
};

int kvd_pool_init(struct kvd_pool *pool, uint32_t nr_pages);
void kvd_pool_exit(struct kvd_pool *pool);
int64_t kvd_pool_alloc_run(struct kvd_pool *pool, uint32_t nr, uint32_t align);
void kvd_pool_free_run(struct kvd_pool *pool, uint32_t first, uint32_t nr);
bool kvd_pool_page_used(const struct kvd_pool *pool, uint32_t page);

#endif /* KVD_POOL_H */
