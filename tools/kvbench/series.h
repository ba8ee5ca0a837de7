/* SPDX-License-Identifier: MIT */
/* The time series and kvd's admin socket (series.c). */
#ifndef KVB_SERIES_H
#define KVB_SERIES_H

#include "kvbench.h"
#include "../emit.h"

/*
 * KV_ADMIN_STATUS into a->reply, checked: the header in *@st, the number
 * of struct kv_admin_ns records after it (-errno on failure).
 */
int kvb_admin_status(const struct kvb_opts *o, struct agg *a,
		     struct kv_admin_status *st);

void kvb_series_free(struct kvb_series *ts);

/*
 * One point: the pool and each model's namespace from KV_ADMIN_STATUS
 * (its header also in *@out when not NULL), the phase and the models'
 * counts so far from the shared books. 0 or -errno.
 */
int kvb_sample_take(const struct kvb_opts *o, struct agg *a,
		    struct kv_admin_status *out);

/*
 * Before the run (monitors connected, nothing started): the first point
 * and kvd's pool-wide counters (reclaims).
 */
int kvb_series_begin(const struct kvb_opts *o, struct agg *a);

/* After the run (monitors still connected): the last point, counters. */
void kvb_series_end(const struct kvb_opts *o, struct agg *a);

/*
 * One row per sample: time since the start, the phase and its busy
 * model, the pool's pages in use, and per namespace its pages, blocks in
 * use, cached blocks and its hit ratio so far (blocks).
 */
void kvb_emit_series(struct kv_emit *e, const struct kvb_opts *o,
		     const struct agg *a);

/* The per-namespace summary of the run. */
void kvb_emit_namespaces(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a);

#endif /* KVB_SERIES_H */
