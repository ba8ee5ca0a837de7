/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: one model geometry's blocks, carved from slabs of pages, with
 * per-block ref counts and a record of which client holds which block.
 */
#ifndef KVD_NS_H
#define KVD_NS_H

#include "kvd.h"
#include "pool.h"

/* Block ids of a namespace: bounded so its books stay reasonable. */
#define KVD_NS_MAX_BLOCKS	(1U << 26)

enum kvd_block_state {
	KVD_BLOCK_NONE = 0,	/* not inside a live slab */
	KVD_BLOCK_FREE,		/* in a slab, ref 0 */
	KVD_BLOCK_HELD,		/* ref > 0 */
};

/* Per-block books, like struct page: indexed by block id. */
struct kvd_block {
	uint32_t	ref;
	uint32_t	slab;		/* index into ns->slabs */
	uint32_t	next_free;	/* slab free list link */
	uint8_t		state;		/* enum kvd_block_state */
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
	uint32_t	nr;
	uint32_t	used;		/* nodes [0, used) were handed out once */
	uint32_t	free_head;	/* returned nodes, linked by hnext */
	uint32_t	*buckets;	/* node + 1, 0 = empty */
	uint32_t	mask;
};

/* What a client holds in its namespace; embedded in struct kvd_client. */
struct kvd_holder {
	uint32_t	slot;		/* client slot: key of its holds */
	uint32_t	head;		/* first hold, KVD_NIL if none */
	uint32_t	nr_blocks;	/* distinct blocks */
	uint32_t	nr_refs;
};

struct kvd_ns {
	bool		live;
	uint32_t	id;
	char		model_id[KV_MODEL_ID_MAX];
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
	uint32_t	blocks_used;
	uint32_t	nr_clients;
	struct kvd_holds holds;
};

int kvd_geometry_check(const struct kv_geometry *g, uint64_t pool_bytes,
		       const char **why);
int kvd_ns_init(struct kvd_ns *ns, struct kvd_pool *pool, uint32_t id,
		const char *model_id, const struct kv_geometry *g);
void kvd_ns_exit(struct kvd_ns *ns);
bool kvd_ns_match(const struct kvd_ns *ns, const char *model_id,
		  const struct kv_geometry *g);

void kvd_holder_init(struct kvd_holder *h, uint32_t slot);
int kvd_ns_alloc(struct kvd_ns *ns, struct kvd_holder *h, uint32_t *ids,
		 uint32_t nr);
int kvd_ns_release(struct kvd_ns *ns, struct kvd_holder *h,
		   const uint32_t *ids, uint32_t nr);
int kvd_ns_ref(struct kvd_ns *ns, struct kvd_holder *h, const uint32_t *ids,
	       uint32_t nr);
void kvd_ns_release_all(struct kvd_ns *ns, struct kvd_holder *h);
uint32_t kvd_ns_hold_count(const struct kvd_ns *ns, uint32_t client,
			   uint32_t block);

#endif /* KVD_NS_H */
