// SPDX-License-Identifier: MIT
/*
 * An engine process's latency samples and counts: each op's samples are
 * bounded (reservoir sampling past the cap, so every sample of a long
 * run has the same chance to be kept); the sums and maxima are exact.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "worker.h"

int kvb_samples_init(struct samples *s, uint32_t cap)
{
	s->v = malloc(((size_t)cap + 1) * sizeof(*s->v));
	s->cap = cap;
	s->nr = 0;
	s->seen = 0;
	return s->v ? 0 : -ENOMEM;
}

static void sample_add(struct worker *w, struct samples *s, uint64_t ns)
{
	uint64_t j;

	if (s->nr < s->cap) {
		s->v[s->nr++] = ns;
		s->seen++;
		return;
	}
	/* Reservoir: each of the seen samples stays with p = cap / seen. */
	j = rng_next(&w->res_rng) % ++s->seen;
	if (j < s->cap)
		s->v[j] = ns;
}

/* @nr ops of kind @op took @ns each (a batch counts once per op). */
void kvb_record(struct worker *w, enum kvb_op op, uint64_t ns, unsigned nr)
{
	struct kvb_opstat *st = &w->r.op[op];

	for (unsigned i = 0; i < nr; i++) {
		sample_add(w, &w->s[op], ns);
		st->sum_ns += ns;
		if (ns > st->max_ns)
			st->max_ns = ns;
	}
	st->ops += nr;
}

/* -ENOSPC with nothing of our own live: others must release first. */
int kvb_wait_for_room(struct worker *w, uint64_t *stuck_since,
		      unsigned *tries)
{
	struct timespec ts = { 0, 50000L << (*tries < 5 ? *tries : 5) };
	uint64_t t = now_ns();

	if (!*stuck_since)
		*stuck_since = t;
	if (t - *stuck_since > KVB_ENOSPC_GIVEUP_NS) {
		fprintf(stderr, "kvbench: proc %u: pool exhausted for %llu s with nothing of ours to release; is the pool too small for %u processes?\n",
			w->idx, KVB_ENOSPC_GIVEUP_NS / NSEC_PER_SEC,
			w->o->procs);
		return -1;
	}
	w->r.waits++;
	(*tries)++;
	nanosleep(&ts, NULL);
	return 0;
}
