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
 * recently taken-in entries go to the disk tier below it (tier_disk.c),
 * or are dropped without one.
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
#include "lat.h"

struct kvd;
struct kvd_ns;
struct kvd_client;

/* The longest a request waits for a tier's read: then -ETIMEDOUT. */
#define KVD_TIER_IO_WAIT_NS	(10ULL * 1000000000ULL)

/* An entry's state; the disk tier's pass through I/O. */
enum kvd_tier_state {
	KVD_TE_FREE = 0,
	KVD_TE_READY,		/* servable: in the index and on the LRU */
	KVD_TE_WRITING,		/* disk: in the index (so a lookup waits
				 * for it), never served before it lands */
	KVD_TE_READING,		/* disk: being read into the host tier */
};

struct kvd_tier_entry {
	struct kv_hash	key;		/* the namespace's index key */
	uint64_t	sig;		/* kvd_tier_sig of its namespace */
	uint64_t	sum;		/* XXH3-64 of its bytes */
	uint64_t	bytes;
	void		*data;		/* host: its bytes */
	uint64_t	tick;		/* demotion order */
	uint32_t	hnext;		/* index chain: slot + 1, 0 ends */
	uint32_t	lru_prev, lru_next;	/* KVD_NIL ends; head coldest */
	uint32_t	unit, units;	/* disk: its run of 4 KiB units */
	uint32_t	sunit;		/* disk: its staging run, during I/O */
	uint32_t	rd_next;	/* disk: the next entry of its read */
	uint64_t	io_ns;		/* disk: when its I/O was issued */
	uint8_t		state;		/* enum kvd_tier_state */
	bool		from_disk;	/* host: read back from the disk tier */
};

/* The disk tier's own parts (tier_disk.c). */
struct kvd_disk {
	int		fd;		/* the file or block device */
	bool		direct;		/* opened O_DIRECT */
	uint32_t	nr_units;	/* 4 KiB units of the file */
	unsigned long	*used;		/* bitmap of them */
	uint32_t	cursor;		/* next-fit */
	uint8_t		*stage;		/* registered staging buffer */
	uint32_t	stage_units;
	unsigned long	*stage_used;
	uint32_t	stage_cursor;
	void		*ring;		/* struct io_uring */
	int		evfd;		/* the ring's completions, to the loop */
	uint64_t	evbuf;
	uint32_t	inflight;	/* writes and reads */
	uint64_t	writes, reads, errors, busy;
	struct kvd_lat	read_lat, write_lat;	/* issue to completion */
	struct kvd_late { uint32_t slot; int32_t res; } *late;
	uint32_t	nr_late;	/* reads finished while nested */
	bool		flushing;	/* kvd stops: room is waited for */
	uint64_t	seq;		/* the last write's order number */
	char		why[320];	/* set-up failure, for the log */
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
	uint32_t	nr_indexed;	/* entries in it, in any state */
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
	struct kvd_disk	*disk;		/* the disk tier: NULL for the host */
	/* host: where its coldest go when it is full (the disk tier's
	 * kvd_disk_spill, set by it: tier.c does not call up); NULL: they
	 * are dropped. True when it took the entry's bytes; @e NULL ends a
	 * burst: the writes it queued are submitted together. */
	bool		(*spill)(struct kvd *d, const struct kvd_tier_entry *e);
};

/*
 * kvd_tiers_init - the tiers of d->cfg (host_tier_bytes), after the
 * backend: on a pool kvd cannot read (cuda), -EOPNOTSUPP with *why.
 * kvd_tiers_exit frees them.
 */
int kvd_tiers_init(struct kvd *d, const char **why);
void kvd_tiers_exit(struct kvd *d);
/* kvd_tiers_start - once the event loop runs: watch the disk's ring. */
int kvd_tiers_start(struct kvd *d);
/*
 * kvd_tiers_stop - kvd stops, its clients gone, its namespaces not yet:
 * with disk_tier_persist, the pool's and the host tier's cached blocks
 * are written to the disk tier, and waited for.
 */
void kvd_tiers_stop(struct kvd *d);

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
 * failed for it), *@from_disk of them read back from the disk tier.
 */
uint32_t kvd_tier_promote(struct kvd *d, struct kvd_client *c,
			  const struct kv_hash *hashes, uint32_t from,
			  uint32_t nr, uint32_t *ids, bool fresh,
			  uint32_t *from_disk);

/*
 * The two halves of kvd_tier_promote, for an ALLOC_PREFIX that must take
 * the run out of the tier before its own allocation evicts into it:
 * kvd_tier_take (the run of @hashes[@from..@nr) the host tier has, out
 * of it, into @run), then kvd_tier_land (as kvd_tier_promote, from
 * @run) or kvd_tier_untake (back into the tier, as the newest).
 */
struct kvd_tier_run {
	struct kvd_tier_entry *got;
	uint32_t	from, n;
};
void kvd_tier_take(struct kvd *d, struct kvd_client *c,
		   const struct kv_hash *hashes, uint32_t from, uint32_t nr,
		   struct kvd_tier_run *run);
uint32_t kvd_tier_land(struct kvd *d, struct kvd_client *c,
		       const struct kv_hash *hashes, struct kvd_tier_run *run,
		       uint32_t *ids, bool fresh, uint32_t *from_disk);
void kvd_tier_untake(struct kvd *d, struct kvd_tier_run *run);

/* kvd_tier_check - the tiers' books: 0, or -EUCLEAN with *why. */
int kvd_tier_check(const struct kvd *d, const char **why);

/*
 * kvd_tier_fetch - before a LOOKUP or ALLOC_PREFIX of @hashes[0..@nr):
 * the blocks past its pool hits that only the disk tier has (or has in
 * flight) are read into the host tier. -EINPROGRESS when it has to wait
 * for them (the request is parked and tried again once they land), 0
 * when it can go on now.
 */
int kvd_tier_fetch(struct kvd *d, struct kvd_client *c,
		   const struct kv_hash *hashes, uint32_t nr);

/* The disk tier's completions are ready (its eventfd, from the loop). */
void kvd_tier_io_done(struct kvd *d, int res);

/* ---- between tier.c and tier_disk.c ---- */
uint32_t __kvd_tier_find(const struct kvd_tier *t, uint64_t sig,
			 const struct kv_hash *key);
uint32_t __kvd_tier_slot(struct kvd_tier *t);
void __kvd_tier_index(struct kvd_tier *t, uint32_t s);
void __kvd_tier_lru_add(struct kvd_tier *t, uint32_t s);
void __kvd_tier_lru_del(struct kvd_tier *t, uint32_t s);
void __kvd_tier_forget(struct kvd_tier *t, uint32_t s);
void __kvd_tier_host_drop(struct kvd *d, uint32_t s);
bool __kvd_tier_host_put(struct kvd *d, const struct kv_hash *key,
			 uint64_t sig, const void *src, uint64_t off,
			 uint64_t bytes, bool from_disk);
int __kvd_tier_books_init(struct kvd_tier *t, uint64_t pool_bytes);
void __kvd_tier_books_exit(struct kvd_tier *t);
/* tier.c: the host tier, below the disk tier (tier_disk.c) */
int kvd_host_tier_init(struct kvd *d, const char **why);
void kvd_host_tier_exit(struct kvd *d);
int kvd_host_tier_check(const struct kvd *d, const char **why);

#endif /* KVD_TIER_H */
