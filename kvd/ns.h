/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: one model geometry's blocks, carved from slabs of pages, with
 * per-block ref counts and a record of which client holds which block.
 */
#ifndef KVD_NS_H
#define KVD_NS_H

#include "kvd.h"
#include "pool.h"

/* Refs on one block, holds included: far from wrapping a u32. */
#define KVD_REF_MAX		(1U << 30)

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
	uint32_t	parent;		/* committed parent, KVD_NIL for a root */
	uint32_t	nr_children;	/* committed blocks whose parent this is */
	union {
		struct {		/* on the LRU: cached leaves */
			uint32_t lru_prev, lru_next;
		};
		struct {		/* owner != 0: the owner's list */
			uint32_t own_prev, own_next;
		};
	};
	uint32_t	owner;		/* client slot + 1, 0: no owner */
	uint64_t	tick;		/* pool clock when last released */
	uint32_t	hnext;		/* index chain: id + 1, 0 ends */
	struct kv_hash	key;		/* index key (tenant secret mixed in) */
	uint8_t		state;		/* enum kvd_block_state */
	bool		committed;
	bool		on_lru;
	bool		mark;		/* scratch for batch checks */
};

struct kvd_slab {
	uint32_t	first_page;
	uint32_t	first_block;
	uint32_t	nr_blocks;
	uint32_t	nr_free;	/* free list + never carved */
	uint32_t	nr_carved;	/* blocks [first, first + nr_carved) seen */
	uint32_t	free_head;
	uint32_t	prev, next;	/* partial list (live) or free slot list */
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

struct kvd_holds {
	struct kvd_hold	*nodes;
	uint32_t	cap;
	uint32_t	nr;		/* nodes in use */
	uint32_t	owned;		/* holds counted in their block instead */
	uint32_t	used;		/* nodes [0, used) were handed out once */
	uint32_t	free_head;	/* returned nodes, linked by hnext */
	uint32_t	*buckets;	/* node + 1, 0 = empty */
	uint32_t	mask;
};

/*
 * Pages charged to a namespace or a tenant, and its quota: min pages are
 * never reclaimed by others, max pages are never exceeded (-EDQUOT).
 * 0 means none. Tenant accounts are shared by their namespaces.
 */
struct kvd_acct {
	uint32_t	pages;
	uint32_t	min_pages;
	uint32_t	max_pages;
};

/* What a client holds in its namespace; embedded in struct kvd_client. */
struct kvd_holder {
	uint32_t	slot;		/* client slot: key of its holds */
	uint32_t	head;		/* first hold node, KVD_NIL if none */
	uint32_t	own_head;	/* first block it owns, KVD_NIL if none */
	uint32_t	nr_blocks;	/* distinct blocks */
	uint32_t	nr_refs;
	uint32_t	max_refs;	/* most refs it may hold, 0: no limit */
};

/*
 * The most refs one client holds in all without max_client_blocks: its
 * u32 total (and kv_stats' client_refs) never wraps, whatever each
 * block's own KVD_REF_MAX allows.
 */
#define KVD_CLIENT_REFS_MAX	(1U << 31)

/* May @hr take @n more refs? (max_client_blocks in kvd.conf) */
static inline bool kvd_holder_room(const struct kvd_holder *hr, uint32_t n)
{
	uint64_t max = hr->max_refs ? hr->max_refs : KVD_CLIENT_REFS_MAX;

	return (uint64_t)hr->nr_refs + n <= max;
}

struct kvd_ns {
	bool		live;
	uint32_t	id;
	char		model_id[KV_MODEL_ID_MAX];
	char		model_rev[KV_MODEL_REV_MAX];
	struct kv_geometry geom;
	uint64_t	block_bytes;
	uint64_t	slab_bytes;
	uint32_t	slab_pages;
	uint32_t	slab_align;	/* pages; a slab starts at a multiple */
	uint32_t	max_blocks;	/* pool_bytes / block_bytes */
	struct kvd_pool	*pool;
	struct kvd_block *blocks;	/* [max_blocks] */
	struct kvd_slab	*slabs;		/* [max_slabs] */
	uint32_t	max_slabs;
	uint32_t	nr_slabs;
	uint32_t	free_slab;	/* returned slab slots */
	uint32_t	slab_slots_used; /* slots [0, used) were handed out once */
	uint32_t	partial;	/* live slabs with a free block */
	uint32_t	nr_blocks;	/* blocks in live slabs */
	uint32_t	blocks_used;	/* ref > 0 */
	uint32_t	nr_clients;
	struct kvd_holds holds;
	struct kvd_acct	acct;		/* this namespace's pages and quota */
	struct kvd_acct	*tacct;		/* its tenant's (may be NULL) */

	/* prefix cache (kvd/prefix.c) */
	uint32_t	tenant;
	uint64_t	seed;		/* per-tenant secret mixed into keys */
	uint32_t	*index;		/* [mask + 1] buckets: id + 1, 0 empty */
	uint32_t	index_mask;
	uint32_t	lru_head;	/* least recently used: evicted first */
	uint32_t	lru_tail;
	uint32_t	lru_len;
	uint32_t	cached_blocks;	/* state CACHED */
	uint32_t	committed_blocks;
	uint64_t	lookups;
	uint64_t	hit_blocks;
	uint64_t	evictions;
};

int kvd_geometry_check(const struct kv_geometry *g, uint64_t pool_bytes,
		       const char **why);
int kvd_ns_init(struct kvd_ns *ns, struct kvd_pool *pool, uint32_t id,
		const char *model_id, const char *model_rev,
		const struct kv_geometry *g, uint32_t tenant, uint64_t seed);
void kvd_ns_exit(struct kvd_ns *ns);
bool kvd_ns_match(const struct kvd_ns *ns, const char *model_id,
		  const char *model_rev, const struct kv_geometry *g,
		  uint32_t tenant);
uint32_t kvd_ns_waste_ppm(const struct kvd_ns *ns);

void kvd_holder_init(struct kvd_holder *h, uint32_t slot);
int kvd_ns_alloc(struct kvd_ns *ns, struct kvd_holder *h, uint32_t *ids,
		 uint32_t nr);
int kvd_ns_alloc_check(const struct kvd_ns *ns, const struct kvd_holder *hr,
		       uint32_t nr);
int kvd_ns_release(struct kvd_ns *ns, struct kvd_holder *h,
		   const uint32_t *ids, uint32_t nr);
int kvd_ns_ref(struct kvd_ns *ns, struct kvd_holder *h, const uint32_t *ids,
	       uint32_t nr);
void kvd_ns_release_all(struct kvd_ns *ns, struct kvd_holder *h);
int kvd_ns_cow_begin(struct kvd_ns *ns, struct kvd_holder *hr,
		     const uint32_t *ids, uint32_t *dst, uint32_t nr);
void kvd_ns_cow_end(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		    const uint32_t *dst, uint32_t nr, bool copied);
uint32_t kvd_ns_hold_count(const struct kvd_ns *ns, uint32_t client,
			   uint32_t block);

/* Ref counting shared with prefix.c: _get takes a held or cached block,
 * _put drops a ref (a committed block is cached at 0, others freed). */
void kvd_block_get(struct kvd_ns *ns, uint32_t id);
void kvd_block_put(struct kvd_ns *ns, uint32_t id);
/* Caller checked: one more ref for @hr (hold and block), or one less. */
int __kvd_hold_get(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id);
void __kvd_hold_put(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t id);
/* Caller checked: @id has ref 0 and is not committed: back to its slab. */
void __kvd_block_free(struct kvd_ns *ns, uint32_t id);
int __kvd_ns_alloc_ids(struct kvd_ns *ns, struct kvd_holder *hr,
		       uint32_t *ids, uint32_t nr);

/* prefix.c: the prefix cache of a namespace */
bool kvd_ns_reclaimable(const struct kvd_ns *ns, uint32_t pages);
int kvd_prefix_reclaim(struct kvd_ns *ns);
int kvd_prefix_init(struct kvd_ns *ns);
void kvd_prefix_exit(struct kvd_ns *ns);
void kvd_prefix_cache(struct kvd_ns *ns, uint32_t id);
void kvd_prefix_uncache(struct kvd_ns *ns, uint32_t id);
int kvd_prefix_evict_one(struct kvd_ns *ns, uint32_t *id);
uint32_t kvd_prefix_evict_all(struct kvd_ns *ns);
int kvd_prefix_lookup(struct kvd_ns *ns, struct kvd_holder *hr,
		      const struct kv_hash *hashes, uint32_t nr, uint32_t *ids);
int kvd_prefix_alloc(struct kvd_ns *ns, struct kvd_holder *hr,
		     const struct kv_hash *hashes, uint32_t n_hashes,
		     uint32_t *ids, uint32_t nr);
int kvd_prefix_commit(struct kvd_ns *ns, struct kvd_holder *hr,
		      struct kv_commit *e, uint32_t nr);
int kvd_ns_check(struct kvd_ns *ns, const char **why);
bool __kvd_hold_live(const struct kvd_ns *ns, uint32_t node);
struct kv_admin_tree_node;
int kvd_prefix_tree(struct kvd_ns *ns, struct kv_admin_tree_node *out,
		    uint32_t max, uint32_t depth);

#endif /* KVD_NS_H */
