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
	pool->used = NULL;
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
	uint64_t start = 0;

	if (!nr || !align)
		return -EINVAL;
	while (start + nr <= pool->nr_pages) {
		uint64_t busy = UINT64_MAX;

		for (uint64_t p = start + nr; p-- > start;) {
			if (test_bit(pool->used, (uint32_t)p)) {
				busy = p;
				break;
			}
		}
		if (busy == UINT64_MAX) {
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
	pool->pages_used -= nr;
}
