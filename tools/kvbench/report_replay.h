/* SPDX-License-Identifier: MIT */
/* The replay's sections of the report (report_replay.c). */
#ifndef KVB_REPORT_REPLAY_H
#define KVB_REPORT_REPLAY_H

#include "kvbench.h"
#include "../emit.h"

/* The model and its geometry (the load's config and the replay's). */
void kvb_emit_geometry(struct kv_emit *e, const struct kvb_opts *o,
		       const struct agg *a);

/* One row per process; with --models, its model after pid. */
void kvb_emit_replay_procs(struct kv_emit *e, const struct kvb_opts *o,
			   const struct child *ch, unsigned n);

void kvb_emit_replay_config(struct kv_emit *e, const struct kvb_opts *o,
			    const struct agg *a);

void kvb_emit_trace(struct kv_emit *e, const struct kvb_opts *o);

void kvb_emit_replay_results(struct kv_emit *e, const struct kvb_opts *o,
			     const struct agg *a);

/* The token-granular bound beside the block bound (tokens), or why not. */
void kvb_emit_token_bound(struct kv_emit *e, const struct kvb_bound *b,
			  unsigned bt);

void kvb_emit_bound(struct kv_emit *e, const struct agg *a);

/* --host-tier-size: the private kvd's tier over the run (a->tier). */
void kvb_emit_host_tier(struct kv_emit *e, const struct agg *a);

/* --disk-tier-size: the private kvd's disk tier over the run. */
void kvb_emit_disk_tier(struct kv_emit *e, const struct agg *a);

/* --disk-tier-size: the promotion pass and fio beside it (a->promo). */
void kvb_emit_promotion(struct kv_emit *e, const struct kvb_opts *o,
			const struct agg *a);

/* --compare-tier: the pool-only run (o->tier_base) beside this one. */
void kvb_emit_tier_compare(struct kv_emit *e, const struct kvb_opts *o,
			   const struct agg *a);

void kvb_emit_memory(struct kv_emit *e, const struct kvb_opts *o,
		     const struct agg *a);

void kvb_emit_allocators(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a);

#endif /* KVB_REPORT_REPLAY_H */
