/* SPDX-License-Identifier: MIT */
/*
 * Tiers behind the pool: committed blocks the pool evicts are kept here
 * instead of dropped, and brought back when a lookup misses the pool but
 * hits a tier. This is the host-memory tier: host RAM of its own, apart
 * from the pool, host_tier_size bytes (0: off). Each entry keeps its
 * namespace's signature (tenant, model id, revision, geometry), the
 * block's index key (tenant key mixed in) and an XXH3-64 checksum of its
 * bytes, so a block only ever comes back to the namespace it left, and a
 * corrupted one is dropped, not served. When the tier is full its least
 * recently demoted entries are dropped (a disk tier below it is to take
 * them: not built yet).
 *
 * Above ns.c: the pool calls kvd_tier_demote through pool->on_evict with
 * the block's bytes still in place; opdef.c calls kvd_tier_promote after
 * a lookup's pool hits.
 */
#ifndef KVD_TIER_H
#define KVD_TIER_H

#include <stdbool.h>
#include <stdint.h>
#include <kv/abi.h>

struct kvd;
struct kvd_ns;
struct kvd_client;

struct kvd_tier_entry {
	struct kv_hash	key;		/* the namespace's index key */
	uint64_t	sig;		/* kvd_tier_sig of its namespace */
	uint64_t	sum;		/* XXH3-64 of its bytes */
	uint64_t	bytes;
	void		*data;		/* NULL: the slot is free */
	uint64_t	tick;		/* demotion order */
	uint32_t	hnext;		/* index chain: slot + 1, 0 ends */
	uint32_t	lru_prev, lru_next;	/* KVD_NIL ends; head coldest */
};

struct kvd_tier {
	uint64_t	cap_bytes;	/* 0: the tier is off */
	uint64_t	used_bytes;
	uint32_t	nr_entries;
	struct kvd_tier_entry *e;	/* [cap_slots] */
	uint32_t	cap_slots;
	uint32_t	free_slot;	/* free list through hnext, KVD_NIL */
	uint32_t	*index;		/* [mask + 1]: slot + 1, 0 empty */
	uint32_t	index_mask;
	uint32_t	lru_head, lru_tail;
	uint64_t	clock;
	/* since kvd started */
	uint64_t	demotions;	/* blocks taken in */
	uint64_t	promotions;	/* blocks brought back to the pool */
	uint64_t	lookups;	/* lookups that asked it */
	uint64_t	drops;		/* dropped for room */
	uint64_t	corrupt;	/* dropped: checksum mismatch */
	uint64_t	replaced;	/* taken in again under the same key */
	/* $KVD_FAULT_TIER_CORRUPT=N, for tests: one byte of every Nth
	 * block taken in is flipped after its checksum (0: never) */
	uint32_t	fault_corrupt;
};

/*
 * kvd_tiers_init - the tiers of d->cfg (host_tier_bytes), after the
 * backend: on a pool kvd cannot read (cuda), -EOPNOTSUPP with *why.
 * kvd_tiers_exit frees them.
 */
int kvd_tiers_init(struct kvd *d, const char **why);
void kvd_tiers_exit(struct kvd *d);

/* The signature of a namespace: equal only for the same tenant, model
 * id, revision and geometry. */
uint64_t kvd_tier_sig(const struct kvd_ns *ns);

/*
 * kvd_tier_promote - the hashes @hashes[@from..@nr) that missed the pool
 * but sit in the host tier, contiguously from @from: copied into blocks
 * @c holds (taken here for a LOOKUP, @fresh NULL; for an ALLOC_PREFIX,
 * @fresh = @ids + @from, blocks it already allocated), committed under
 * their hashes and given back in @ids[@from..). Returns the blocks
 * promoted (0 when none, or when the pool has no room: a lookup is not
 * failed for it).
 */
uint32_t kvd_tier_promote(struct kvd *d, struct kvd_client *c,
			  const struct kv_hash *hashes, uint32_t from,
			  uint32_t nr, uint32_t *ids, bool fresh);

/* kvd_tier_check - the tier's books: 0, or -EUCLEAN with *why. */
int kvd_tier_check(const struct kvd *d, const char **why);

#endif /* KVD_TIER_H */
