/* SPDX-License-Identifier: MIT */
/*
 * One engine process of the fleet modes: its state (struct worker),
 * its latency samples (bounded, reservoir sampling past the cap) and
 * its counts, which fleet.c sends the parent. The alloc/release loop is
 * alloc.c, the replay's replay.c.
 */
#ifndef KVB_WORKER_H
#define KVB_WORKER_H

#include "kvbench.h"

/* Latency samples of one op, bounded: reservoir sampling past cap. */
struct samples {
	uint64_t	*v;
	uint32_t	nr, cap;
	uint64_t	seen;
};

/* One synthetic request: its blocks and its pattern's generation. */
struct req {
	uint64_t	seq;
	uint64_t	gen;
	uint32_t	nblocks;
	uint32_t	cap;
	kv_block_t	*ids;
};

/* One open request of a replay. */
struct rseq {
	struct kv_seq	*s;
	size_t		req;
	int64_t		unused;		/* its share of kvb_shared */
	struct kvb_span	*span;
};

struct worker {
	const struct kvb_opts *o;
	struct kv_client *c;
	unsigned	idx;
	unsigned	model;		/* idx % models */
	unsigned	rank;		/* among its model's processes */
	unsigned	mprocs;		/* its model's processes */
	struct kvb_mshared *ms;	/* its model's shared books (replay) */
	uint64_t	rng;		/* request lengths */
	uint64_t	res_rng;	/* reservoir slots */
	uint64_t	gen_base;
	size_t		words;		/* 64-bit words per block */
	struct req	*live;		/* ring of live_max, oldest first */
	uint32_t	head, nlive;
	uint32_t	live_blocks;
	struct req	*pend;		/* batch requests awaiting ALLOC */
	int		*res;		/* a result per pending request */
	uint64_t	next_seq;
	unsigned	msgs;
	struct samples	s[KVB_NR_OPS];
	struct kvb_result r;
	/* replay */
	struct rseq	*seqs;		/* ring of o->live, oldest first */
	uint64_t	*sub;		/* sub-block ids of one prompt */
	struct kv_hash	*hash;		/* its full blocks, prompt first */
	uint32_t	*tok;		/* its tokens from tok_base on */
	uint64_t	t_go;		/* phase start, for --timestamps */
	uint64_t	t_base_us;	/* arrival of the phase's first request */
	struct kvb_span	*spans;		/* one per request opened */
	uint32_t	nr_spans;
	bool		starving;	/* counted in kvb_shared.starved */
	bool		stopped;	/* another process failed */
};

int kvb_samples_init(struct samples *s, uint32_t cap);
/* @nr ops of kind @op took @ns each (a batch counts once per op). */
void kvb_record(struct worker *w, enum kvb_op op, uint64_t ns, unsigned nr);
/*
 * -ENOSPC with nothing of our own live: others must release first.
 * Sleeps a little longer each try; -1 after KVB_ENOSPC_GIVEUP_NS.
 */
int kvb_wait_for_room(struct worker *w, uint64_t *stuck_since,
		      unsigned *tries);

#endif /* KVB_WORKER_H */
