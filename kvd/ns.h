/* SPDX-License-Identifier: MIT */
/*
 * Namespaces: one model geometry's blocks, carved from slabs of pages, with
 * per-block ref counts and a record of which client holds which block.
 * What the rest of the daemon uses; the layers below (prefix.c, hold.c,
 * slab.c) are declared in ns_internal.h, for this subsystem's files only.
 */
#ifndef KVD_NS_H
#define KVD_NS_H

#include "kvd.h"
#include "pool.h"

struct kvd_block;		/* per-block books (ns_internal.h) */
struct kvd_slab;
struct kvd_hold;

/* The hold table: who holds refs on shared blocks (kvd/hold.c). */
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
 * The pins of a namespace (kvd/pin.c): which blocks a pin keeps and
 * until when, a min-heap by expiry with each pinned block's place in it.
 */
struct kvd_pin {
	uint64_t	expires_ns;	/* kvd_now_ns() clock */
	uint32_t	block;
	uint32_t	pad;
};

struct kvd_pins {
	struct kvd_pin	*heap;		/* [cap], heap[0] expires first */
	uint32_t	nr;
	uint32_t	cap;
	uint32_t	*at;		/* [max_blocks]: heap place + 1, 0 for
					 * none; NULL until the first pin */
	uint32_t	max_blocks;
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
	uint32_t	peak_pages;	/* most held at once (a tenant's kv_stats) */
};

/* @a takes @n more pages. */
static inline void kvd_acct_charge(struct kvd_acct *a, uint32_t n)
{
	a->pages += n;
	if (a->pages > a->peak_pages)
		a->peak_pages = a->pages;
}

/* What a client holds in its namespace; embedded in struct kvd_client. */
struct kvd_holder {
	uint32_t	slot;		/* client slot: key of its holds */
	uint32_t	head;		/* first hold node, KVD_NIL if none */
	uint32_t	own_head;	/* first block it owns, KVD_NIL if none */
	uint32_t	nr_blocks;	/* distinct blocks */
	uint32_t	nr_refs;
	uint32_t	max_refs;	/* most refs it may hold, 0: no limit */
	uint32_t	quota_why;	/* its last -EDQUOT: KV_QUOTA_* */
	uint32_t	quota_limit;	/* the limit that refused it */
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

/*
 * A namespace's prefix-cache counters, by model key (tenant, model id and
 * revision, geometry), kept when its slot is freed (idle, or taken for
 * another model) so that a model coming back goes on counting where it
 * stopped. Each slot keeps one such record besides its live namespace:
 * at most twice max_namespaces models are remembered.
 */
struct kvd_ns_kept {
	bool		used;
	uint32_t	tenant;
	char		model_id[KV_MODEL_ID_MAX];
	char		model_rev[KV_MODEL_REV_MAX];
	struct kv_geometry geom;
	uint64_t	lookups;
	uint64_t	lookup_blocks;
	uint64_t	hit_blocks;
	uint64_t	evictions;
};

/*
 * The key of a tenant's cache index: an XXH3 secret of the default size
 * (XXH3_SECRET_DEFAULT_SIZE, at least XXH3_SECRET_SIZE_MIN), derived by
 * kvd/tenant.c from the tenant's whole secret. Key material: it never
 * leaves kvd, and is zeroed when dropped.
 */
#define KVD_TENANT_KEY_BYTES	192
struct kvd_tenant_key {
	uint8_t		b[KVD_TENANT_KEY_BYTES];
};

struct kvd_ns {
	bool		live;
	uint32_t	id;		/* its slot in d->ns */
	uint32_t	handle;		/* its number for clients and kvctl */
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
	struct kvd_tenant_key key;	/* its tenant's, mixed into keys */
	uint32_t	*index;		/* [mask + 1] buckets: id + 1, 0 empty */
	uint32_t	index_mask;
	uint32_t	lru_head;	/* list by tick: head the oldest */
	uint32_t	lru_tail;
	uint32_t	*lru_heap;	/* [max_blocks] min-heap by tick */
	uint32_t	lru_heap_len;
	uint32_t	lru_len;	/* evictable: listed + in the heap */
	uint32_t	cached_blocks;	/* state CACHED */
	uint32_t	committed_blocks;
	/* since the model first came (kept across idle frees) */
	uint64_t	lookups;	/* LOOKUP and ALLOC_PREFIX requests */
	uint64_t	lookup_blocks;	/* full-block hashes those asked for */
	uint64_t	hit_blocks;	/* of them, found */
	uint64_t	evictions;
	/* retention (kvd/retain.c): pins hold their blocks as a holder */
	struct kvd_pins	pins;
	struct kvd_holder pin_holder;	/* slot KVD_PIN_SLOT */
	uint32_t	pinned_pages;	/* of its slabs with a pinned block */
	struct kvd_ns_kept kept;	/* the slot's, not this namespace's:
					 * survives kvd_ns_init and _exit */
};

/* kvd/ns.c: namespaces and the operations clients send */
int kvd_geometry_check(const struct kv_geometry *g, uint64_t pool_bytes,
		       const char **why);
int kvd_ns_init(struct kvd_ns *ns, struct kvd_pool *pool, uint32_t id,
		const char *model_id, const char *model_rev,
		const struct kv_geometry *g, uint32_t tenant,
		const struct kvd_tenant_key *key);
void kvd_ns_exit(struct kvd_ns *ns);
void kvd_ns_kept_drop(struct kvd_pool *pool, uint32_t tenant);
bool kvd_ns_match(const struct kvd_ns *ns, const char *model_id,
		  const char *model_rev, const struct kv_geometry *g,
		  uint32_t tenant);
uint32_t kvd_ns_waste_ppm(const struct kvd_ns *ns);
int kvd_ns_alloc(struct kvd_ns *ns, struct kvd_holder *h, uint32_t *ids,
		 uint32_t nr);
int kvd_ns_alloc_check(const struct kvd_ns *ns, const struct kvd_holder *hr,
		       uint32_t nr);
int kvd_ns_lookup(struct kvd_ns *ns, struct kvd_holder *hr,
		  const struct kv_hash *hashes, uint32_t nr, uint32_t *ids);
int kvd_ns_alloc_prefix(struct kvd_ns *ns, struct kvd_holder *hr,
			const struct kv_hash *hashes, uint32_t n_hashes,
			uint32_t *ids, uint32_t nr);
int kvd_ns_commit(struct kvd_ns *ns, struct kvd_holder *hr,
		  struct kv_commit *e, uint32_t nr);
int kvd_ns_release(struct kvd_ns *ns, struct kvd_holder *h,
		   const uint32_t *ids, uint32_t nr);
int kvd_ns_ref(struct kvd_ns *ns, struct kvd_holder *h, const uint32_t *ids,
	       uint32_t nr);
void kvd_ns_release_all(struct kvd_ns *ns, struct kvd_holder *h);
int kvd_ns_cow_begin(struct kvd_ns *ns, struct kvd_holder *hr,
		     const uint32_t *ids, uint32_t *dst, uint32_t nr);
void kvd_ns_cow_end(struct kvd_ns *ns, struct kvd_holder *hr, uint32_t *ids,
		    const uint32_t *dst, uint32_t nr, bool copied);
uint32_t kvd_ns_evict_all(struct kvd_ns *ns);

/* kvd/retain.c: priorities and pins (KV_OP_RETAIN, kvctl pin) */
int kvd_ns_retain(struct kvd_ns *ns, struct kvd_holder *hr,
		  const uint32_t *ids, uint32_t nr, uint32_t prio,
		  uint64_t pin_ms, uint32_t flags, uint64_t now_ns);
int kvd_ns_pin_prefix(struct kvd_ns *ns, const struct kv_hash *key,
		      uint64_t ttl_ms, uint64_t now_ns, uint32_t *changed);
uint32_t kvd_ns_pins_expire(struct kvd_ns *ns, uint64_t now_ns);
uint32_t kvd_ns_pin_limit(const struct kvd_ns *ns);
uint64_t kvd_ns_pin_expires(const struct kvd_ns *ns, const struct kv_hash *key);
/* How many of @hashes the pool has, in a row from the first: no ref taken. */
uint32_t kvd_ns_peek(const struct kvd_ns *ns, const struct kv_hash *hashes,
		     uint32_t nr);
/* The index key of client hash @h in @ns (its tenant key mixed in). */
struct kv_hash kvd_ns_key(const struct kvd_ns *ns, const struct kv_hash *h);

/* kvd/hold.c */
void kvd_holder_init(struct kvd_holder *h, uint32_t slot);
uint32_t kvd_ns_hold_count(const struct kvd_ns *ns, uint32_t client,
			   uint32_t block);

/* kvd/ns_debug.c: read-only views for kvctl and the invariant mode */
int kvd_ns_check(struct kvd_ns *ns, const char **why);
struct kv_admin_tree_node;
int kvd_prefix_tree(struct kvd_ns *ns, struct kv_admin_tree_node *out,
		    uint32_t max, uint32_t depth);

#endif /* KVD_NS_H */
