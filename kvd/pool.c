// SPDX-License-Identifier: MIT
/*
 * Page pool: a free-page bitmap searched for aligned runs.
 *
 * Slabs must start at pool offsets that are multiples of
 * lcm(page size, block_bytes) (DESIGN.md, one address rule). Those are not
 * powers of two (a 5 MiB block needs runs starting at multiples of 10 MiB),
 * so a buddy allocator does not fit. As CMA and lib/genalloc.c do with
 * bitmap_find_next_zero_area_off(), we search the bitmap for a run of nr
 * clear bits whose first bit is a multiple of align.
 *
 * Example: 8 pages, pages 1 and 4 used, nr = 2, align = 2:
 *   used  0 1 0 0 1 0 0 0
 *   start 0: page 1 used -> next candidate roundup(2, 2) = 2
 *   start 2: pages 2,3 clear -> run [2, 4)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define BITS_PER_LONG	(8 * sizeof(unsigned long))

static inline bool test_bit(const unsigned long *map, uint32_t bit)
{
	return map[bit / BITS_PER_LONG] & (1UL << (bit % BITS_PER_LONG));
}

static void assign_bits(unsigned long *map, uint32_t first, uint32_t nr,
			bool set)
{
	for (uint32_t b = first; b < first + nr; b++) {
		unsigned long m = 1UL << (b % BITS_PER_LONG);

		if (set)
			map[b / BITS_PER_LONG] |= m;
		else
			map[b / BITS_PER_LONG] &= ~m;
	}
}

int kvd_pool_init(struct kvd_pool *pool, uint32_t nr_pages)
{
	size_t words = (nr_pages + BITS_PER_LONG - 1) / BITS_PER_LONG;

	memset(pool, 0, sizeof(*pool));
	if (!nr_pages)
		return -EINVAL;
	pool->used = calloc(words ? words : 1, sizeof(unsigned long));
	if (!pool->used)
		return -ENOMEM;
	pool->nr_pages = nr_pages;
	pool->bytes = (uint64_t)nr_pages * KV_PAGE_BYTES;
	return 0;
}

void kvd_pool_exit(struct kvd_pool *pool)
{
	free(pool->used);
	free(pool->ext_owner);
	free(pool->ext_last);
	free(pool->ext_used);
	pool->used = NULL;
	pool->ext_owner = pool->ext_last = NULL;
	pool->ext_used = NULL;
}

/*
 * kvd_pool_set_extents - split the pool into extents of @extent_pages
 * (the last may be shorter). From then on a run of pages is only given
 * to an owner whose extents it touches are its own or unused, so no two
 * tenants ever share an extent (DESIGN.md: isolation by extents).
 */
int kvd_pool_set_extents(struct kvd_pool *pool, uint32_t extent_pages)
{
	uint32_t n;

	if (!extent_pages)
		return -EINVAL;
	n = (pool->nr_pages + extent_pages - 1) / extent_pages;
	pool->ext_owner = malloc(n * sizeof(*pool->ext_owner));
	pool->ext_last = malloc(n * sizeof(*pool->ext_last));
	pool->ext_used = calloc(n, sizeof(*pool->ext_used));
	if (!pool->ext_owner || !pool->ext_last || !pool->ext_used)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		pool->ext_owner[i] = pool->ext_last[i] = KVD_EXT_FREE;
	pool->extent_pages = extent_pages;
	pool->nr_extents = n;
	return 0;
}

/* May @owner use pages [first, first + nr)? Their extents must agree. */
static bool extents_allow(const struct kvd_pool *pool, uint64_t first,
			  uint32_t nr, int32_t owner)
{
	if (!pool->nr_extents || owner == KVD_EXT_ANY)
		return true;
	for (uint64_t e = first / pool->extent_pages;
	     e <= (first + nr - 1) / pool->extent_pages; e++)
		if (pool->ext_owner[e] != KVD_EXT_FREE &&
		    pool->ext_owner[e] != owner)
			return false;
	return true;
}

/* Charge pages to their extents; +1 or -1 per page. */
static int extents_charge(struct kvd_pool *pool, uint32_t first, uint32_t nr,
			  int32_t owner, int sign)
{
	int ret = 0;

	if (!pool->nr_extents)
		return 0;
	for (uint32_t p = first; p < first + nr; p++) {
		uint32_t e = p / pool->extent_pages;

		if (sign > 0 && pool->ext_used[e]++ == 0 &&
		    owner != KVD_EXT_ANY) {
			pool->ext_owner[e] = owner;
			/*
			 * ext_last says whose bytes the extent holds: only a
			 * claim that succeeded makes them @owner's. After a
			 * failure the run is undone; the extents past it
			 * were never claimed and must not look @owner's, or
			 * a later claim would keep another tenant's bytes.
			 */
			if (pool->on_claim) {
				if (ret)
					continue;
				ret = pool->on_claim(pool, e, owner);
				if (ret)
					continue;
			}
			pool->ext_last[e] = owner;
		}
		if (sign < 0 && --pool->ext_used[e] == 0)
			pool->ext_owner[e] = KVD_EXT_FREE;
	}
	return ret;
}

bool kvd_pool_page_used(const struct kvd_pool *pool, uint32_t page)
{
	return page < pool->nr_pages && test_bit(pool->used, page);
}

/*
 * kvd_pool_alloc_run - take @nr contiguous pages starting at a multiple of
 * @align pages. Returns the first page, or -ENOSPC when no such run is
 * free, -EINVAL for nr or align of 0. O(nr_pages) bit tests at worst.
 */
int64_t kvd_pool_alloc_run(struct kvd_pool *pool, uint32_t nr, uint32_t align)
{
	return kvd_pool_alloc_run_for(pool, nr, align, KVD_EXT_ANY);
}

/*
 * kvd_pool_alloc_run_for - as kvd_pool_alloc_run, for tenant @owner: only
 * runs whose extents are @owner's or unused; they become @owner's. When
 * an extent cannot be handed over, on_claim's error (-ENOMEM: no memory
 * to back it).
 */
int64_t kvd_pool_alloc_run_for(struct kvd_pool *pool, uint32_t nr,
			       uint32_t align, int32_t owner)
{
	uint64_t start = 0;

	if (!nr || !align)
		return -EINVAL;
	if (pool->pages_used + (uint64_t)nr > pool->nr_pages)
		return -ENOSPC;	/* full: no scan (eviction calls this a lot) */
	while (start + nr <= pool->nr_pages) {
		uint64_t busy = UINT64_MAX;

		for (uint64_t p = start + nr; p-- > start;) {
			if (test_bit(pool->used, (uint32_t)p)) {
				busy = p;
				break;
			}
		}
		if (busy == UINT64_MAX && !extents_allow(pool, start, nr, owner))
			busy = start;	/* step on to the next aligned start */
		if (busy == UINT64_MAX) {
			int ret = extents_charge(pool, (uint32_t)start, nr,
						 owner, 1);

			if (ret) {
				extents_charge(pool, (uint32_t)start, nr, owner,
					       -1);
				return ret;
			}
			assign_bits(pool->used, (uint32_t)start, nr, true);
			pool->pages_used += nr;
			if (pool->pages_used > pool->peak_pages_used)
				pool->peak_pages_used = pool->pages_used;
			return (int64_t)start;
		}
		/* Skip past the last used page of the window, keep alignment. */
		start = (busy + 1 + align - 1) / align * align;
	}
	return -ENOSPC;
}

void kvd_pool_free_run(struct kvd_pool *pool, uint32_t first, uint32_t nr)
{
	for (uint32_t p = first; p < first + nr; p++)
		kvd_warn_on_once(!test_bit(pool->used, p));
	assign_bits(pool->used, first, nr, false);
	extents_charge(pool, first, nr, KVD_EXT_ANY, -1);
	pool->pages_used -= nr;
}
