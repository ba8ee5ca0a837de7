/* SPDX-License-Identifier: MIT */
/*
 * The namespace subsystem's insides, for its own files only (as the
 * kernel's mm/internal.h): the per-block books and the lower layers
 * ns.c builds on. Calls go down only: ns_debug.c and ns.c call into
 * those below; reclaim.c calls prefix.c and slab.c; the rest call none
 * of each other nor anything above (slab.c calls pool.c, nothing else).
 * What a lower layer finds out (a block evicted, a slab made) it returns.
 *
 *   ns_debug.c  read-only checks and dumps                (ns.h)
 *   retain.c    priorities and pins, over ns.c's refs      (ns.h)
 *   ns.c        namespaces, refs, the operations           (ns.h)
 *   reclaim.c   room for a request, reclaim across namespaces
 *   prefix.c    index + LRU of committed blocks: a leaf
 *   hold.c      the hold table: which client holds what: a leaf
 *   pin.c       the pin books: which block a pin keeps, till when: a leaf
 *   slab.c      slabs and block carving, over pool.c
 */
#ifndef KVD_NS_INTERNAL_H
#define KVD_NS_INTERNAL_H

#include "ns.h"
#include "pool.h"

/* Refs on one block, holds included: far from wrapping a u32. */
#define KVD_REF_MAX		(1U << 30)

/* The holder slot of a namespace's pins (struct kvd_ns pin_holder): no
 * client's (slots are below KVD_MAX_CLIENTS), its owner mark not 0. */
#define KVD_PIN_SLOT		0xfffffff0U

/* Block ids of a namespace: bounded so its books stay reasonable. */
#define KVD_NS_MAX_BLOCKS	(1U << 26)

enum kvd_block_state {
	KVD_BLOCK_NONE = 0,	/* not inside a live slab */
	KVD_BLOCK_FREE,		/* in a slab, ref 0 */
	KVD_BLOCK_HELD,		/* ref > 0 (committed or not) */
	KVD_BLOCK_CACHED,	/* ref 0, committed: in the prefix cache */
};

/*
 * Per-block books, like struct page: indexed by block id. Every block is
 * exactly one of free / held / cached; committed blocks (held or cached)
 * are in the prefix index under key, linked to their parent.
 *
 * The first client to hold a block is its owner: its refs are counted in
 * the block itself (own_refs) and the block is on its owner's list, so
 * the common case (one holder) touches no hash table. Other holders of a
 * shared block are counted in struct kvd_holds. The unions are safe
 * because the states exclude each other: next_free is for FREE blocks,
 * the LRU links for ref-0 (CACHED) ones, own_refs and the owner links for
 * held blocks with an owner.
 */
struct kvd_block {
	uint32_t	ref;
	uint32_t	slab;		/* index into ns->slabs */
	union {
		uint32_t next_free;	/* FREE: slab free list link */
		uint32_t own_refs;	/* owner != 0: the owner's refs */
	};
	uint32_t	parent;		/* committed parent, KVD_NIL for a root;
					 * kept after eviction until reuse */
	uint32_t	nr_children;	/* committed blocks whose parent this is */
	union {
		struct {		/* on the LRU: cached leaves; in
					 * its heap: lru_prev the place */
			uint32_t lru_prev, lru_next;
		};
		struct {		/* owner != 0: the owner's list */
			uint32_t own_prev, own_next;
		};
	};
	uint32_t	owner;		/* client slot + 1, 0: no owner */
	uint64_t	tick;		/* pool clock when last released:
					 * its place in the LRU */
	uint32_t	hnext;		/* index chain: id + 1, 0 ends */
	struct kv_hash	key;		/* index key (tenant key mixed
					 * in): never shown outside kvd */
	uint8_t		state;		/* enum kvd_block_state */
	bool		committed;
	bool		on_lru;
	bool		mark;		/* scratch for batch checks */
};
_Static_assert(sizeof(struct kvd_block) == 64, "a block's books: one line");

/*
 * A block's tick is its place in the eviction order: its priority
 * (KV_PRIO_*, abi.h) above the pool clock at its last release, so that
 * the LRU (prefix.c) and reclaim's slab ages (reclaim.c), which compare
 * ticks, take lower priorities first and the oldest among equals. The
 * clock's 56 bits do not wrap at a release per nanosecond for two years.
 */
#define KVD_PRIO_SHIFT		56
#define KVD_CLOCK_MASK		((1ULL << KVD_PRIO_SHIFT) - 1)

static inline uint32_t kvd_block_prio(const struct kvd_block *b)
{
	return (uint32_t)(b->tick >> KVD_PRIO_SHIFT);
}

static inline void kvd_block_set_prio(struct kvd_block *b, uint32_t prio)
{
	b->tick = (uint64_t)prio << KVD_PRIO_SHIFT | (b->tick & KVD_CLOCK_MASK);
}

struct kvd_slab {
	uint32_t	first_page;
	uint32_t	first_block;
	uint32_t	nr_blocks;
	uint32_t	nr_free;	/* free list + never carved */
	uint32_t	nr_carved;	/* blocks [first, first + nr_carved) seen */
	uint32_t	free_head;
	uint32_t	prev, next;	/* partial list (live) or free slot list */
	uint32_t	nr_held;	/* blocks with ref > 0 (ns.c) */
	uint32_t	nr_out;		/* committed children, in other slabs,
					 * of its blocks (prefix.c) */
	uint64_t	tick;		/* newest release of a block of it
					 * into the cache: its last use */
	uint32_t	nr_pinned;	/* its blocks a pin holds (retain.c) */
	bool		live;
};

/* One (client, block) pair with the number of refs that client holds. */
struct kvd_hold {
	uint32_t	block;
	uint32_t	client;
	uint32_t	count;
	uint32_t	hnext;		/* hash bucket chain */
	uint32_t	cprev, cnext;	/* the holder's list */
};

/*
 * Block @id left the cache for reuse or reclaim, its bytes still there:
 * a tier behind the pool may keep them (pool->on_evict, kvd/tier.c).
 */
static inline void kvd_evicted(struct kvd_ns *ns, uint32_t id)
{
	if (ns->pool && ns->pool->on_removed)
		ns->pool->on_removed(ns->pool, ns, id);
	if (ns->pool && ns->pool->on_evict)
		ns->pool->on_evict(ns->pool, ns, id, &ns->blocks[id].key);
}

/* kvd/prefix.c: (namespace, hash) -> committed block, and the LRU */
int kvd_prefix_init(struct kvd_ns *ns);
void kvd_prefix_exit(struct kvd_ns *ns);
struct kv_hash kvd_key_hash(const struct kvd_tenant_key *k,
			    const struct kv_hash *h);
struct kv_hash kvd_prefix_key(const struct kvd_ns *ns, const struct kv_hash *h);
uint32_t kvd_prefix_find(const struct kvd_ns *ns, const struct kv_hash *key);
uint32_t kvd_prefix_match(struct kvd_ns *ns, const struct kv_hash *hashes,
			  uint32_t nr, uint32_t *ids);
void kvd_prefix_publish(struct kvd_ns *ns, uint32_t id,
			const struct kv_hash *key, const struct kv_hash *parent);
void kvd_prefix_cache(struct kvd_ns *ns, uint32_t id);
void kvd_prefix_uncache(struct kvd_ns *ns, uint32_t id);
void kvd_prefix_recache(struct kvd_ns *ns, uint32_t id);
uint32_t kvd_prefix_lru_first(const struct kvd_ns *ns);
int kvd_prefix_evict_one(struct kvd_ns *ns, uint32_t *id);
void kvd_prefix_evict_leaf(struct kvd_ns *ns, uint32_t id);
void kvd_prefix_unevict(struct kvd_ns *ns, uint32_t id);

/*
 * kvd/reclaim.c: kvd_ns_room_check - can @nr new blocks be had for @ns
 * (its free blocks, its own cached leaves, new slabs within its quotas,
 * reclaim rehearsed)? 0, -EDQUOT, -ENOSPC, -ENOMEM; evicts nothing.
 * kvd_ns_reclaim - free whole slabs of other namespaces (or this one's
 * leaf) for one new slab of @ns: pages freed (> 0), or 0 when none can.
 */
int kvd_ns_room_check(struct kvd_ns *ns, uint32_t nr);
int kvd_ns_reclaim(struct kvd_ns *ns);

/* kvd/ns.c: one ref more or less for a holder (retain.c's pins) */
int kvd_ns_hold_get(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id);
void kvd_ns_hold_put(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id);

/* kvd/pin.c: the pin books */
void kvd_pins_init(struct kvd_pins *p, uint32_t max_blocks);
void kvd_pins_exit(struct kvd_pins *p);
int kvd_pins_reserve(struct kvd_pins *p, uint32_t n);
bool kvd_pins_has(const struct kvd_pins *p, uint32_t id);
uint64_t kvd_pins_expires(const struct kvd_pins *p, uint32_t id);
int kvd_pins_set(struct kvd_pins *p, uint32_t id, uint64_t expires_ns);
bool kvd_pins_del(struct kvd_pins *p, uint32_t id);
uint32_t kvd_pins_expired(struct kvd_pins *p, uint64_t now_ns);
int kvd_pins_check(const struct kvd_pins *p, const char **why);

/* kvd/hold.c: the hold table */
int kvd_holds_init(struct kvd_holds *hs, uint32_t cap);
void kvd_holds_exit(struct kvd_holds *hs);
uint32_t kvd_hold_find(const struct kvd_holds *hs, uint32_t client,
		       uint32_t block);
void kvd_hold_add(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block);
void kvd_hold_del(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t block);
bool kvd_hold_live(const struct kvd_ns *ns, uint32_t node);

/*
 * Where @client's refs on @block are counted: the block itself when the
 * client owns it (no hash lookup), else its hash node. NULL when it holds
 * none.
 */
static inline uint32_t *kvd_hold_counter(const struct kvd_ns *ns,
					 uint32_t client, uint32_t block)
{
	struct kvd_block *b = &ns->blocks[block];
	uint32_t i;

	if (b->owner == client + 1)
		return &b->own_refs;
	i = kvd_hold_find(&ns->holds, client, block);
	return i == KVD_NIL ? NULL : &ns->holds.nodes[i].count;
}

/* kvd/slab.c: slabs of one namespace, over the page pool */
uint64_t kvd_slab_pages_for(uint64_t block_bytes);
int kvd_slab_geometry(struct kvd_ns *ns);
int kvd_slab_init(struct kvd_ns *ns);
void kvd_slab_exit(struct kvd_ns *ns);
int kvd_slab_new(struct kvd_ns *ns);
uint32_t kvd_slab_carve(struct kvd_ns *ns);
void kvd_slab_free_block(struct kvd_ns *ns, uint32_t id);

#endif /* KVD_NS_INTERNAL_H */
