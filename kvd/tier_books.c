// SPDX-License-Identifier: MIT
/*
 * The books every tier keeps (tier.h): an index of (namespace
 * signature, key) over a slot array, and an LRU of the servable entries
 * by the order they came in. A leaf: the host tier (tier.c) and the disk
 * tier (tier_disk.c) build on it and it calls neither.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY	/* XXH3_state_t on the stack */
#include <xxhash.h>

#include "ns.h"
#include "tier.h"

#define TIER_MIN_SLOTS	1024

uint64_t kvd_tier_sig(const struct kvd_ns *ns)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, ns->model_id, sizeof(ns->model_id));
	XXH3_64bits_update(&st, ns->model_rev, sizeof(ns->model_rev));
	XXH3_64bits_update(&st, &ns->geom, sizeof(ns->geom));
	XXH3_64bits_update(&st, &ns->key, sizeof(ns->key));
	return XXH3_64bits_digest(&st);
}

static uint32_t *bucket(const struct kvd_tier *t, uint64_t sig,
			const struct kv_hash *key)
{
	uint64_t h;

	memcpy(&h, key->b, sizeof(h));
	return &t->index[(h ^ sig) & t->index_mask];
}

/* The slot of (@sig, @key), in any state but free, or KVD_NIL. */
uint32_t __kvd_tier_find(const struct kvd_tier *t, uint64_t sig,
			 const struct kv_hash *key)
{
	for (uint32_t i = *bucket(t, sig, key); i; i = t->e[i - 1].hnext) {
		const struct kvd_tier_entry *e = &t->e[i - 1];

		if (e->sig == sig && !memcmp(&e->key, key, sizeof(*key)))
			return i - 1;
	}
	return KVD_NIL;
}

/* Slot @s, filled (its state set), into the index: a lookup finds it. */
static void index_link(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];
	uint32_t *b = bucket(t, e->sig, &e->key);

	e->hnext = *b;
	*b = s + 1;
}

/*
 * Twice the buckets once there are two entries a bucket: a tier holds
 * many more blocks than the pool it was first sized by (small blocks,
 * a large tier), and chains must stay short. Best effort: without the
 * memory the chains just grow.
 */
static void index_grow(struct kvd_tier *t)
{
	uint64_t nb = (uint64_t)t->index_mask + 1;
	uint32_t *n;

	if (t->nr_indexed <= 2 * nb || nb >= (1U << 31))
		return;
	n = calloc(nb * 2, sizeof(*n));
	if (!n)
		return;
	free(t->index);
	t->index = n;
	t->index_mask = (uint32_t)(nb * 2 - 1);
	for (uint32_t s = 0; s < t->cap_slots; s++)
		if (t->e[s].state != KVD_TE_FREE)
			index_link(t, s);
}

void __kvd_tier_index(struct kvd_tier *t, uint32_t s)
{
	t->nr_indexed++;
	index_link(t, s);
	index_grow(t);
}

/* Slot @s becomes servable: the newest on the LRU, its bytes counted. */
void __kvd_tier_lru_add(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];

	e->state = KVD_TE_READY;
	e->tick = ++t->clock;
	e->lru_prev = t->lru_tail;
	e->lru_next = KVD_NIL;
	if (t->lru_tail == KVD_NIL)
		t->lru_head = s;
	else
		t->e[t->lru_tail].lru_next = s;
	t->lru_tail = s;
	t->used_bytes += e->bytes;
	t->nr_entries++;
}

static void index_del(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];
	uint32_t *p = bucket(t, e->sig, &e->key);

	while (*p != s + 1)
		p = &t->e[*p - 1].hnext;
	*p = e->hnext;
	e->hnext = 0;
	t->nr_indexed--;
}

/* Off the LRU (no longer servable, still indexed); its bytes uncounted. */
void __kvd_tier_lru_del(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];

	if (e->lru_prev == KVD_NIL)
		t->lru_head = e->lru_next;
	else
		t->e[e->lru_prev].lru_next = e->lru_next;
	if (e->lru_next == KVD_NIL)
		t->lru_tail = e->lru_prev;
	else
		t->e[e->lru_next].lru_prev = e->lru_prev;
	t->used_bytes -= e->bytes;
	t->nr_entries--;
}

/* Slot @s out of the index (and the LRU, if servable), back to free;
 * its bytes (host) are the caller's. */
void __kvd_tier_forget(struct kvd_tier *t, uint32_t s)
{
	struct kvd_tier_entry *e = &t->e[s];

	index_del(t, s);
	if (e->state == KVD_TE_READY)
		__kvd_tier_lru_del(t, s);
	e->state = KVD_TE_FREE;
	e->data = NULL;
	e->hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
	t->free_slot = s;
}

/* A free slot, the array grown when none is left. */
uint32_t __kvd_tier_slot(struct kvd_tier *t)
{
	struct kvd_tier_entry *n;
	uint32_t s, cap;

	if (t->free_slot != KVD_NIL) {
		s = t->free_slot;
		t->free_slot = t->e[s].hnext ? t->e[s].hnext - 1 : KVD_NIL;
		t->e[s].hnext = 0;
		return s;
	}
	cap = t->cap_slots * 2;
	n = realloc(t->e, (size_t)cap * sizeof(*n));
	if (!n)
		return KVD_NIL;
	memset(n + t->cap_slots, 0, (size_t)(cap - t->cap_slots) * sizeof(*n));
	t->e = n;
	for (s = cap - 1; s > t->cap_slots; s--) {
		t->e[s].hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
		t->free_slot = s;
	}
	s = t->cap_slots;
	t->cap_slots = cap;
	return s;
}

/* The index and first slots of @t, sized for @pool_bytes of pool. */
int __kvd_tier_books_init(struct kvd_tier *t, uint64_t pool_bytes)
{
	uint64_t nb = 1;

	memset(t, 0, sizeof(*t));
	t->free_slot = t->lru_head = t->lru_tail = KVD_NIL;
	/* an index bucket per 64 KiB of pool is ample */
	while (nb < pool_bytes / KV_PAGE_BYTES * 64)
		nb <<= 1;
	t->index = calloc(nb, sizeof(*t->index));
	t->e = calloc(TIER_MIN_SLOTS, sizeof(*t->e));
	if (!t->index || !t->e)
		return -ENOMEM;
	t->index_mask = (uint32_t)(nb - 1);
	t->cap_slots = TIER_MIN_SLOTS;
	for (uint32_t s = TIER_MIN_SLOTS; s--; ) {
		t->e[s].hnext = t->free_slot == KVD_NIL ? 0 : t->free_slot + 1;
		t->free_slot = s;
	}
	return 0;
}

/* The entries' memory is their tier's to free (tier.c), before this. */
void __kvd_tier_books_exit(struct kvd_tier *t)
{
	free(t->e);
	free(t->index);
	memset(t, 0, sizeof(*t));
}

