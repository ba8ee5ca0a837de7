// SPDX-License-Identifier: MIT
/*
 * A replay's offline figures: the stream's infinite-cache bound, and
 * with --compare-allocators what static, chunked and paged allocation
 * would have needed over the lock-step schedule and over the schedule the
 * run really had (tools/trace.c computes both).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bound.h"

/* The offline figures: bound, and with --compare-allocators the sim. */
int kvb_replay_analyse(const struct kvb_opts *o, struct agg *a)
{
	unsigned bt = o->geom.block_tokens;
	int ret;

	struct kvb_event *ev = NULL;
	size_t nev = 0;

	ret = kvb_trace_bound(o->tr, bt, &a->bound);
	if (!ret && o->compare)
		ret = kvb_sched_lockstep(o->tr->nr, o->procs, o->live, &ev,
					 &nev);
	if (!ret && o->compare) {
		a->sim.max_model_len = o->max_model_len;
		a->sim.chunk = KVB_CHUNK_TOKENS;
		ret = kvb_trace_alloc_sim(o->tr, bt, ev, nev, &a->sim);
		a->have_sim = !ret;
	}
	free(ev);
	if (ret)
		fprintf(stderr, "kvbench: offline analysis: %s\n",
			strerror(-ret));
	return ret ? 1 : 0;
}

static int cmp_event(const void *a, const void *b)
{
	const struct kvb_event *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->sign - y->sign;	/* leaving before arriving */
}

/* The allocators over the schedule the run really had. */
void kvb_replay_as_run(const struct kvb_opts *o, struct agg *a,
		       const struct child *ch)
{
	struct kvb_event *ev;
	size_t n = 0, k = 0;
	int ret;

	for (unsigned i = 0; i < o->procs; i++)
		if (ch[i].got)
			n += ch[i].r.nr_spans;
	ev = malloc((2 * n + 1) * sizeof(*ev));
	if (!ev)
		return;
	for (unsigned i = 0; i < o->procs; i++) {
		for (uint32_t j = 0; ch[i].got && j < ch[i].r.nr_spans; j++) {
			const struct kvb_span *sp = &ch[i].spans[j];

			ev[k++] = (struct kvb_event){ sp->t_open, sp->req, 1 };
			ev[k++] = (struct kvb_event){
				sp->t_close ? sp->t_close : UINT64_MAX,
				sp->req, -1 };
		}
	}
	qsort(ev, k, sizeof(*ev), cmp_event);
	a->run.max_model_len = o->max_model_len;
	a->run.chunk = KVB_CHUNK_TOKENS;
	ret = kvb_trace_alloc_sim(o->tr, o->geom.block_tokens, ev, k, &a->run);
	a->have_run = !ret;
	if (ret)
		fprintf(stderr, "kvbench: allocators over the run's schedule: %s\n",
			strerror(-ret));
	free(ev);
}
