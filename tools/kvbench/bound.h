/* SPDX-License-Identifier: MIT */
/* A replay's offline figures (bound.c). */
#ifndef KVB_BOUND_H
#define KVB_BOUND_H

#include "kvbench.h"

/* The offline figures: bound, and with --compare-allocators the sim. */
int kvb_replay_analyse(const struct kvb_opts *o, struct agg *a);

/* The allocators over the schedule the run really had. */
void kvb_replay_as_run(const struct kvb_opts *o, struct agg *a,
		       const struct child *ch);

#endif /* KVB_BOUND_H */
