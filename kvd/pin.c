// SPDX-License-Identifier: MIT
/*
 * The pin books of a namespace: which blocks a pin keeps in the pool and
 * until when. A binary min-heap by expiry gives the next pin to end in
 * O(1) and takes one out in O(log n); each pinned block's place in the
 * heap (at[]) lets a pin be renewed or dropped by block id. A leaf: it
 * keeps books only; retain.c takes and drops the refs that pins hold.
 *
 * at[] is calloc'd on the first pin and stays untouched zero pages where
 * no block is pinned, as the LRU heap does (prefix.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "ns_internal.h"

void kvd_pins_init(struct kvd_pins *p, uint32_t max_blocks)
{
	*p = (struct kvd_pins){ .max_blocks = max_blocks };
}

void kvd_pins_exit(struct kvd_pins *p)
{
	free(p->heap);
	free(p->at);
	kvd_pins_init(p, p->max_blocks);
}

static void heap_set(struct kvd_pins *p, uint32_t i, struct kvd_pin e)
{
	p->heap[i] = e;
	p->at[e.block] = i + 1;
}

static void heap_up(struct kvd_pins *p, uint32_t i)
{
	struct kvd_pin e = p->heap[i];

	while (i) {
		uint32_t up = (i - 1) / 2;

		if (p->heap[up].expires_ns <= e.expires_ns)
			break;
		heap_set(p, i, p->heap[up]);
		i = up;
	}
	heap_set(p, i, e);
}

static void heap_down(struct kvd_pins *p, uint32_t i)
{
	struct kvd_pin e = p->heap[i];

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= p->nr)
			break;
		if (c + 1 < p->nr &&
		    p->heap[c + 1].expires_ns < p->heap[c].expires_ns)
			c++;
		if (e.expires_ns <= p->heap[c].expires_ns)
			break;
		heap_set(p, i, p->heap[c]);
		i = c;
	}
	heap_set(p, i, e);
}

/*
 * kvd_pins_reserve - room for @n more pins, so that a request pinning
 * many blocks fails before it changes anything: 0 or -ENOMEM. The heap
 * doubles; at[] comes with the first pin.
 */
int kvd_pins_reserve(struct kvd_pins *p, uint32_t n)
{
	struct kvd_pin *heap;
	uint64_t cap;

	if (!p->at) {
		p->at = calloc(p->max_blocks, sizeof(*p->at));
		if (!p->at)
			return -ENOMEM;
	}
	if ((uint64_t)p->nr + n <= p->cap)
		return 0;
	cap = p->cap ? p->cap : 64;
	while (cap < (uint64_t)p->nr + n)
		cap *= 2;
	if (cap > p->max_blocks)
		cap = p->max_blocks;
	if (cap < (uint64_t)p->nr + n)
		return -ENOMEM;
	heap = realloc(p->heap, (size_t)cap * sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	p->heap = heap;
	p->cap = (uint32_t)cap;
	return 0;
}

bool kvd_pins_has(const struct kvd_pins *p, uint32_t id)
{
	return p->at && p->at[id];
}

/* When @id's pin ends, 0 when it has none. */
uint64_t kvd_pins_expires(const struct kvd_pins *p, uint32_t id)
{
	return kvd_pins_has(p, id) ? p->heap[p->at[id] - 1].expires_ns : 0;
}

/*
 * kvd_pins_set - pin @id until @expires_ns, or keep its pin when that
 * ends later already. 1: a new pin, 0: an existing one, -ENOMEM.
 */
int kvd_pins_set(struct kvd_pins *p, uint32_t id, uint64_t expires_ns)
{
	int ret;

	if (kvd_pins_has(p, id)) {
		uint32_t i = p->at[id] - 1;

		if (p->heap[i].expires_ns < expires_ns) {
			p->heap[i].expires_ns = expires_ns;
			heap_down(p, i);	/* later: it sinks */
		}
		return 0;
	}
	ret = kvd_pins_reserve(p, 1);
	if (ret)
		return ret;
	heap_set(p, p->nr, (struct kvd_pin){ .expires_ns = expires_ns,
					     .block = id });
	heap_up(p, p->nr++);
	return 1;
}

/* Drop @id's pin: true if it had one. */
bool kvd_pins_del(struct kvd_pins *p, uint32_t id)
{
	uint32_t i;

	if (!kvd_pins_has(p, id))
		return false;
	i = p->at[id] - 1;
	p->at[id] = 0;
	if (i == --p->nr)
		return true;
	heap_set(p, i, p->heap[p->nr]);
	if (i && p->heap[(i - 1) / 2].expires_ns > p->heap[i].expires_ns)
		heap_up(p, i);
	else
		heap_down(p, i);
	return true;
}

/* The block of a pin ended by @now_ns, taken out; KVD_NIL for none. */
uint32_t kvd_pins_expired(struct kvd_pins *p, uint64_t now_ns)
{
	uint32_t id;

	if (!p->nr || p->heap[0].expires_ns > now_ns)
		return KVD_NIL;
	id = p->heap[0].block;
	kvd_pins_del(p, id);
	return id;
}

/* For kvd_ns_check: every heap entry where at[] says, in heap order. */
int kvd_pins_check(const struct kvd_pins *p, const char **why)
{
	for (uint32_t i = 0; i < p->nr; i++) {
		const struct kvd_pin *e = &p->heap[i];

		if (e->block >= p->max_blocks || p->at[e->block] != i + 1) {
			*why = "a pin's place in its heap is wrong";
			return -EUCLEAN;
		}
		if (i && p->heap[(i - 1) / 2].expires_ns > e->expires_ns) {
			*why = "the pin heap is not in the order of expiry";
			return -EUCLEAN;
		}
	}
	return 0;
}
