// SPDX-License-Identifier: MIT
/*
 * Block-sized pieces of pinned host memory for the host tier on the cuda
 * backend. Page-locking memory is slow (a cuMemHostAlloc costs far more
 * than a block copy), so memory is taken in chunks of KVD_PINNED_CHUNK
 * and carved into slots of one size class per block size, as the
 * kernel's slab allocator carves pages: a get and a put are a free-list
 * pop and push. Chunks go back only at the end (kvd_pinned_exit); the
 * chunks of all classes together stay within a byte limit, so a class
 * that has its memory cannot grow past it.
 *
 * A leaf: the chunks come from the callbacks it is given (cuda.c's
 * cuMemHostAlloc; tests' malloc). Single-threaded, as kvd's loop is.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pinned.h"

/* One slot's bytes: a block rounded to 256, each slot DMA-aligned. */
static uint64_t slot_bytes(uint64_t bytes)
{
	return (bytes + 255) & ~255ULL;
}

static struct kvd_pinned_class *class_of(struct kvd_pinned *a, uint64_t sz)
{
	for (uint32_t i = 0; i < a->nr_cls; i++)
		if (a->cls[i].bytes == sz)
			return &a->cls[i];
	if (a->nr_cls == KVD_PINNED_CLASSES)
		return NULL;
	a->cls[a->nr_cls] = (struct kvd_pinned_class){ .bytes = sz };
	return &a->cls[a->nr_cls++];
}

/* A new chunk carved into @c's slots: 0, or -ENOMEM (none, or over). */
static int grow(struct kvd_pinned *a, struct kvd_pinned_class *c)
{
	uint64_t n = KVD_PINNED_CHUNK / c->bytes, bytes;
	struct kvd_pinned_chunk *chunks;
	uint8_t *p;

	if (!n)
		n = 1;
	bytes = n * c->bytes;
	if (a->total + bytes > a->limit)
		return -ENOMEM;
	if (a->nr_chunks == a->cap_chunks) {
		uint32_t cap = a->cap_chunks ? 2 * a->cap_chunks : 16;

		chunks = realloc(a->chunks, cap * sizeof(*chunks));
		if (!chunks)
			return -ENOMEM;
		a->chunks = chunks;
		a->cap_chunks = cap;
	}
	p = a->chunk_alloc(a->ctx, bytes);
	if (!p)
		return -ENOMEM;
	a->chunks[a->nr_chunks++] = (struct kvd_pinned_chunk){ p, bytes };
	a->total += bytes;
	for (uint64_t i = n; i--;) {	/* lowest address first out */
		*(void **)(p + i * c->bytes) = c->free;
		c->free = p + i * c->bytes;
	}
	return 0;
}

void *kvd_pinned_get(struct kvd_pinned *a, uint64_t bytes)
{
	struct kvd_pinned_class *c = class_of(a, slot_bytes(bytes));
	void *p;

	if (!c || (!c->free && grow(a, c)))
		return NULL;
	p = c->free;
	c->free = *(void **)p;
	c->used++;
	return p;
}

void kvd_pinned_put(struct kvd_pinned *a, void *p, uint64_t bytes)
{
	struct kvd_pinned_class *c = class_of(a, slot_bytes(bytes));

	if (!p || !c)
		return;
	*(void **)p = c->free;
	c->free = p;
	c->used--;
}

void kvd_pinned_exit(struct kvd_pinned *a)
{
	for (uint32_t i = 0; i < a->nr_chunks; i++)
		a->chunk_free(a->ctx, a->chunks[i].p, a->chunks[i].bytes);
	free(a->chunks);
	a->chunks = NULL;
	a->nr_chunks = a->cap_chunks = a->nr_cls = 0;
	a->total = 0;
}
