/* SPDX-License-Identifier: MIT */
/*
 * Pinned host memory in block-sized slots (kvd/pinned.c): the host
 * tier's memory on the cuda backend.
 */
#ifndef KVD_PINNED_H
#define KVD_PINNED_H

#include <stdint.h>

#define KVD_PINNED_CHUNK	(64ULL << 20)	/* page-locked at once */
#define KVD_PINNED_CLASSES	8		/* block sizes at once */

struct kvd_pinned_class {
	uint64_t	bytes;		/* of a slot */
	void		*free;		/* free slots, linked by their first word */
	uint64_t	used;
};

struct kvd_pinned_chunk {
	void		*p;
	uint64_t	bytes;
};

struct kvd_pinned {
	/* set by the user before the first get */
	void		*(*chunk_alloc)(void *ctx, uint64_t bytes);
	void		(*chunk_free)(void *ctx, void *p, uint64_t bytes);
	void		*ctx;
	uint64_t	limit;		/* chunk bytes at most, all classes */
	/* the allocator's */
	uint64_t	total;		/* chunk bytes taken */
	struct kvd_pinned_class cls[KVD_PINNED_CLASSES];
	uint32_t	nr_cls;
	struct kvd_pinned_chunk *chunks;
	uint32_t	nr_chunks, cap_chunks;
};

/*
 * kvd_pinned_get - a slot for @bytes (rounded up to 256), NULL when the
 * chunks would pass a->limit, a ninth block size comes, or chunk_alloc
 * fails. kvd_pinned_put - the slot @p of @bytes back (NULL: nothing).
 * kvd_pinned_exit - every chunk back through chunk_free; slots still out
 * are gone with them. Not thread-safe.
 */
void *kvd_pinned_get(struct kvd_pinned *a, uint64_t bytes);
void kvd_pinned_put(struct kvd_pinned *a, void *p, uint64_t bytes);
void kvd_pinned_exit(struct kvd_pinned *a);

#endif /* KVD_PINNED_H */
