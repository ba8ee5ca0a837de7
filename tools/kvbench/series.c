// SPDX-License-Identifier: MIT
/*
 * The time series of a replay (--sample-ms, --models): every few ms the
 * parent asks kvd's admin socket for its namespaces (KV_ADMIN_STATUS)
 * and keeps the pool's pages and each model's pages, blocks and hit
 * ratio so far; then the report's series and namespaces tables.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "series.h"

/* ---- time series (the parent, through kvd's admin socket) ---- */

/*
 * KV_ADMIN_STATUS into a->reply, checked: the header in *@st, the number
 * of struct kv_admin_ns records after it (-errno on failure).
 */
int kvb_admin_status(const struct kvb_opts *o, struct agg *a,
		     struct kv_admin_status *st)
{
	ssize_t n = kv_admin_call(o->admin_path, KV_ADMIN_STATUS, 0, 0, a->reply);

	if (n < 0)
		return (int)n;
	if ((size_t)n < sizeof(*st))
		return -EPROTO;
	memcpy(st, a->reply, sizeof(*st));
	if (st->magic != KV_MAGIC || st->type != KV_MSG_ADMIN_REPLY)
		return -EPROTO;
	if (st->status < 0)
		return st->status;
	if (st->nr_records > KV_ADMIN_MAX_RECORDS ||
	    (size_t)n < sizeof(*st) +
			st->nr_records * sizeof(struct kv_admin_ns))
		return -EPROTO;
	return (int)st->nr_records;
}

/* Namespace @ns_id's record in a STATUS reply of @n records, or NULL. */
static const struct kv_admin_ns *admin_ns(const struct agg *a, int n,
					  uint32_t ns_id)
{
	const struct kv_admin_ns *r = (const void *)((const char *)a->reply +
				      sizeof(struct kv_admin_status));

	for (int i = 0; i < n; i++)
		if (r[i].id == ns_id)
			return &r[i];
	return NULL;
}

void kvb_series_free(struct kvb_series *ts)
{
	free(ts->pt);
	free(ts->ns);
	memset(ts, 0, sizeof(*ts));
}

/* Room for one more point; false when there is none (said once). */
static bool series_room(struct kvb_series *ts, unsigned models)
{
	size_t cap = ts->cap ? 2 * ts->cap : 256;
	struct kvb_nspoint *ns;
	struct kvb_point *pt;

	if (ts->nr < ts->cap)
		return true;
	if (ts->nr >= KVB_MAX_POINTS) {
		if (!ts->full)
			fprintf(stderr, "kvbench: %u samples taken; the time series stops here (use a larger --sample-ms)\n",
				KVB_MAX_POINTS);
		ts->full = true;
		return false;
	}
	pt = realloc(ts->pt, cap * sizeof(*pt));
	if (pt)
		ts->pt = pt;
	ns = realloc(ts->ns, cap * models * sizeof(*ns));
	if (ns)
		ts->ns = ns;
	if (!pt || !ns) {
		if (!ts->full)
			fprintf(stderr, "kvbench: out of memory for the time series; it stops here\n");
		ts->full = true;
		return false;
	}
	ts->cap = cap;
	return true;
}

/*
 * One point: the pool and each model's namespace from KV_ADMIN_STATUS
 * (its header also in *@out when not NULL), the phase and the models'
 * counts so far from the shared books. 0 or -errno.
 */
int kvb_sample_take(const struct kvb_opts *o, struct agg *a,
		    struct kv_admin_status *out)
{
	struct kvb_series *ts = &a->ts;
	struct kv_admin_status st;
	struct kvb_nspoint *np;
	struct kvb_point *p;
	int n;

	n = kvb_admin_status(o, a, &st);
	if (n < 0) {
		if (!ts->failed)
			fprintf(stderr, "kvbench: admin socket %s: %s; the time series misses samples\n",
				o->admin_path, strerror(-n));
		ts->failed = true;
		return n;
	}
	if (out)
		*out = st;
	if (!series_room(ts, o->models))
		return 0;
	p = &ts->pt[ts->nr];
	np = &ts->ns[ts->nr * o->models];
	p->t_ns = now_ns() - a->t_go;
	p->phase = atomic_load_explicit(&o->sh->phase, memory_order_relaxed);
	p->pool_used = st.pages_used;
	for (unsigned m = 0; m < o->models; m++) {
		const struct kv_admin_ns *r = admin_ns(a, n, a->info[m].ns_id);
		struct kvb_mshared *ms = &o->sh->m[m];

		memset(&np[m], 0, sizeof(np[m]));
		if (r) {
			np[m].pages = r->pages;
			np[m].used = r->blocks_used;
			np[m].cached = r->cached_blocks;
		}
		np[m].prompt_blocks = atomic_load_explicit(&ms->prompt_blocks,
							   memory_order_relaxed);
		np[m].hit_blocks = atomic_load_explicit(&ms->hit_blocks,
							memory_order_relaxed);
	}
	ts->nr++;
	return 0;
}

/*
 * Before the run (monitors connected, nothing started): the first point
 * and kvd's pool-wide counters (reclaims).
 */
int kvb_series_begin(const struct kvb_opts *o, struct agg *a)
{
	a->t_go = now_ns();
	return kvb_sample_take(o, a, &a->st0) ? -1 : 0;
}

/* After the run (monitors still connected): the last point, counters. */
void kvb_series_end(const struct kvb_opts *o, struct agg *a)
{
	a->have_st1 = !kvb_sample_take(o, a, &a->st1);
}

/* ---- report: time series and namespaces ---- */

#define KVB_SERIES_FIXED	4	/* t, phase, busy, pool */
#define KVB_SERIES_PER_NS	4	/* pages, used, cached, hit */

static const struct kv_emit_col series_fixed[KVB_SERIES_FIXED] = {
	{ "t_s",		"t (s)",	7 },
	{ "phase",		"phase",	5 },
	{ "busy",		"busy",		4 },
	{ "pool_pages_used",	"pool pg",	7 },
};

static const struct { const char *key, *header; int width; }
series_ns[KVB_SERIES_PER_NS] = {
	{ "pages",	"pages",	8 },
	{ "used",	"used",		7 },
	{ "cached",	"cached",	9 },
	{ "hit",	"hit",		6 },
};

/* Keys m<k>_pages ..., headers "m<k> pages" ... */
struct series_cols {
	struct kv_emit_col col[KVB_SERIES_FIXED +
			       KVB_MAX_MODELS * KVB_SERIES_PER_NS];
	char		key[KVB_MAX_MODELS * KVB_SERIES_PER_NS][24];
	char		header[KVB_MAX_MODELS * KVB_SERIES_PER_NS][24];
	int		nr;
};

static void series_cols_init(struct series_cols *c, unsigned models)
{
	int k = 0;

	memcpy(c->col, series_fixed, sizeof(series_fixed));
	c->nr = KVB_SERIES_FIXED;
	for (unsigned m = 0; m < models; m++) {
		for (int j = 0; j < KVB_SERIES_PER_NS; j++, k++) {
			snprintf(c->key[k], sizeof(c->key[k]), "m%u_%s", m,
				 series_ns[j].key);
			snprintf(c->header[k], sizeof(c->header[k]), "m%u %s",
				 m, series_ns[j].header);
			c->col[c->nr++] = (struct kv_emit_col){
				c->key[k], c->header[k], series_ns[j].width };
		}
	}
}

/*
 * One row per sample: time since the start, the phase and its busy
 * model, the pool's pages in use, and per namespace its pages, blocks in
 * use, cached blocks and its hit ratio so far (blocks).
 */
void kvb_emit_series(struct kv_emit *e, const struct kvb_opts *o,
		     const struct agg *a)
{
	const struct kvb_series *ts = &a->ts;
	struct series_cols c;
	char busy[16], label[96];

	series_cols_init(&c, o->models);
	snprintf(label, sizeof(label),
		 "time series (every %u ms; per model: pages, blocks in use, cached blocks, hit ratio so far)",
		 o->sample_ms);
	kv_emit_obj_begin(e, "time_series", label);
	kv_emit_table_begin(e, "samples", c.col, c.nr);
	for (size_t i = 0; i < ts->nr; i++) {
		const struct kvb_point *p = &ts->pt[i];
		const struct kvb_nspoint *np = &ts->ns[i * o->models];

		if (p->phase < o->phases)
			snprintf(busy, sizeof(busy), "m%u",
				 p->phase % o->models);
		else
			snprintf(busy, sizeof(busy), "-");
		kv_emit_row_begin(e);
		kv_emit_cell_f64(e, (double)p->t_ns / 1e9);
		kv_emit_cell_u64(e, p->phase < o->phases ? p->phase :
						     o->phases);
		kv_emit_cell_str(e, busy);
		kv_emit_cell_u64(e, p->pool_used);
		for (unsigned m = 0; m < o->models; m++) {
			kv_emit_cell_u64(e, np[m].pages);
			kv_emit_cell_u64(e, np[m].used);
			kv_emit_cell_u64(e, np[m].cached);
			kv_emit_cell_f64(e, ratio(np[m].hit_blocks,
						  np[m].prompt_blocks));
		}
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}

static const struct kv_emit_col ns_cols[] = {
	{ "m",			"m",		-2 },
	{ "model",		"model",	-14 },
	{ "ns",			"ns",		3 },
	{ "layers",		"layers",	6 },
	{ "block_bytes",	"block B",	8 },
	{ "procs",		"procs",	5 },
	{ "requests",		"requests",	8 },
	{ "hit_ratio_blocks",	"hit ratio (blocks)", 18 },
	{ "hit_ratio_tokens",	"hit ratio (tokens)", 18 },
	{ "bound_blocks",	"bound",	6 },
	{ "evictions",		"evictions",	9 },
	{ "pages_start",	"pg start",	8 },
	{ "pages_peak",		"pg peak",	7 },
	{ "pages_end",		"pg end",	6 },
	{ "pages_in",		"pg in",	6 },
	{ "pages_out",		"pg out",	6 },
	{ "peak_blocks_used",	"peak used",	9 },
};

/* Pages of model @m over the samples: first, peak, last, in, out. */
static void ns_pages(const struct kvb_opts *o, const struct agg *a, unsigned m,
		     uint64_t pg[5])
{
	const struct kvb_series *ts = &a->ts;

	memset(pg, 0, 5 * sizeof(pg[0]));
	for (size_t i = 0; i < ts->nr; i++) {
		uint32_t v = ts->ns[i * o->models + m].pages;

		if (!i)
			pg[0] = v;
		if (v > pg[1])
			pg[1] = v;
		if (i && v > pg[2])
			pg[3] += v - pg[2];
		else if (i)
			pg[4] += pg[2] - v;
		pg[2] = v;
	}
}

/* The per-namespace summary of the run. */
void kvb_emit_namespaces(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a)
{
	double bound = ratio(a->bound.hits, a->bound.refs);
	char mdl[16];
	uint64_t pg[5];

	kv_emit_obj_begin(e, "namespaces",
			  "namespaces (pages from the samples; pg in/out: gained/lost between samples)");
	kv_emit_table_begin(e, "models", ns_cols,
			    sizeof(ns_cols) / sizeof(ns_cols[0]));
	for (unsigned m = 0; m < o->models; m++) {
		const struct kvb_result *r = &a->msum[m];

		ns_pages(o, a, m, pg);
		snprintf(mdl, sizeof(mdl), "m%u", m);
		kv_emit_row_begin(e);
		kv_emit_cell_str(e, mdl);
		kv_emit_cell_str(e, o->mdl[m].id);
		kv_emit_cell_u64(e, a->info[m].ns_id);
		kv_emit_cell_u64(e, o->mdl[m].geom.layers);
		kv_emit_cell_u64(e, a->info[m].block_bytes);
		kv_emit_cell_u64(e, o->mdl[m].procs);
		kv_emit_cell_u64(e, r->requests);
		kv_emit_cell_f64(e, ratio(r->hit_blocks, r->prompt_blocks));
		kv_emit_cell_f64(e, ratio(r->hit_tokens, r->prompt_tokens));
		kv_emit_cell_f64(e, bound);
		kv_emit_cell_u64(e, a->have_after ?
				 a->after[m].evictions - a->before[m].evictions :
				 0);
		for (int k = 0; k < 5; k++)
			kv_emit_cell_u64(e, pg[k]);
		kv_emit_cell_u64(e, r->peak_used);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}
