/* SPDX-License-Identifier: MIT */
/*
 * What the trace readers (trace.c), the synthetic workload (trace_synth.c)
 * and the offline analysis (trace_sim.c) share; not for kvbench's modes,
 * which include trace.h.
 */
#ifndef KV_TOOLS_TRACE_INT_H
#define KV_TOOLS_TRACE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trace.h"

/* splitmix64's finalizer (Steele, Lea, Flood 2014): one key, well mixed. */
static inline uint64_t kvb_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* A value of several keys, for the synthetic workload's choices. */
static inline uint64_t kvb_mix3(uint64_t seed, uint64_t tag, uint64_t a,
				 uint64_t b)
{
	return kvb_mix64(kvb_mix64(kvb_mix64(seed ^ tag) ^ a) ^ b);
}

/* Grow *@p (of *@cap elements of @size bytes) to hold @need: 0 or -ENOMEM. */
int kvb_grow(void **p, size_t *cap, size_t need, size_t size);

/* A trace being read or generated. */
struct trace_build {
	struct kvb_trace *tr;
	size_t		reqs_cap, ids_cap;
	uint64_t	t0_us;
	bool		have_t0;
};

/* One more zeroed request at the end of the trace, or NULL (no memory). */
struct kvb_treq *kvb_trace_add_req(struct trace_build *b);
/* Sums and maxima of the requests (tr->sum_in, max_total, span_us, ...). */
void kvb_trace_totals(struct kvb_trace *tr);

#endif
