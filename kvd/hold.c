// SPDX-License-Identifier: MIT
/*
 * The hold table of a namespace: which client holds how many refs on
 * which block. A block's ref count is the sum of its holds' counts; a
 * client can only release or ref blocks it holds, and all its holds are
 * dropped when it dies (ns.c, which also moves the block refs).
 *
 * The first client to hold a block is its owner: its count lives in the
 * block's books and the block is on the owner's list, so the common case
 * (one holder) touches no hash table. Other holders of a shared block get
 * a hash node keyed by (client, block). A leaf: it keeps books only and
 * calls no other file of the daemon.
 */
#include <errno.h>
#include <stdlib.h>

#include "ns_internal.h"

/*
 * Nothing here is touched at creation: calloc'd arrays stay untouched
 * zero pages until used, buckets hold node + 1 (0 = empty), and nodes
 * are handed out below a watermark before the free list is used. So a
 * namespace on a huge pool costs nothing until it holds blocks.
 */
int kvd_holds_init(struct kvd_holds *hs, uint32_t cap)
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

void kvd_holds_exit(struct kvd_holds *hs)
{
	free(hs->nodes);
	free(hs->buckets);
	hs->nodes = NULL;
	hs->buckets = NULL;
}

static inline uint32_t hold_hash(const struct kvd_holds *hs, uint32_t client,
				 uint32_t block)
{
	uint64_t k = ((uint64_t)client << 32 | block) * 0x9e3779b97f4a7c15ULL;

	return (uint32_t)(k >> 32) & hs->mask;
}

/* The hash node of (@client, @block), KVD_NIL if none: non-owners only. */
uint32_t kvd_hold_find(const struct kvd_holds *hs, uint32_t client,
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

uint32_t kvd_ns_hold_count(const struct kvd_ns *ns, uint32_t client,
			   uint32_t block)
{
	const uint32_t *c = kvd_hold_counter(ns, client, block);

	return c ? *c : 0;
}

/*
 * A first ref on @block for @hr, which holds none of it yet; the block is
 * off the LRU (its links become the owner's). It takes ownership when the
 * block has no owner, else a hash node.
 */
void kvd_hold_add(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block)
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
void kvd_hold_del(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block)
{
	struct kvd_block *b = &ns->blocks[block];

	hr->nr_blocks--;
	if (b->owner != hr->slot + 1) {
		hash_del(&ns->holds, hr, kvd_hold_find(&ns->holds, hr->slot,
						       block));
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

/* A hold node in use (not on the free list): the index can find it. */
bool kvd_hold_live(const struct kvd_ns *ns, uint32_t node)
{
	const struct kvd_hold *h = &ns->holds.nodes[node];

	return kvd_hold_find(&ns->holds, h->client, h->block) == node;
}

void kvd_holder_init(struct kvd_holder *h, uint32_t slot)
{
	h->slot = slot;
	h->head = KVD_NIL;
	h->own_head = KVD_NIL;
	h->nr_blocks = 0;
	h->nr_refs = 0;
	h->max_refs = 0;
	h->quota_why = 0;
	h->quota_limit = 0;
}
