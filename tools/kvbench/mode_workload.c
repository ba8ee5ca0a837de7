// SPDX-License-Identifier: MIT
/*
 * kvbench --workload FILE: replay a kvdtrc request stream (the
 * shared_prompts block-manager workload) with the lifecycle its README
 * gives, the one the other block managers were measured with:
 *
 *  - a pool of 16,384 blocks, 32 requests live: admitting one more first
 *    frees the oldest;
 *  - per request: hash its full blocks (kv_hash_blocks, XXH3-128,
 *    chained), LOOKUP the longest cached prefix, ALLOC the rest (the
 *    partial last block too), COMMIT the new full blocks; an ALLOC that
 *    fails with -ENOSPC frees the oldest live request and retries
 *    ("forced");
 *  - freeing a request RELEASEs all its blocks (committed ones stay
 *    cached, evictable).
 *
 * One engine process (this one) against kvd over the real ring. Each of
 * --runs runs starts on an empty cache: a fresh private kvd, or after
 * KV_ADMIN_EVICT on a running one (--socket). The report is the median
 * over the runs of each figure.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../emit.h"
#include "../trace.h"
#include "kvd.h"
#include "lat.h"
#include "modes.h"
#include "report_num.h"
#include "report_replay.h"

#define WL_POOL_BLOCKS		16384U
#define WL_LIVE			32U
#define WL_MODEL		"kvbench-workload"

/* Timed operations; the first four are the README's. */
enum wl_op {
	WL_HASH,
	WL_LOOKUP,
	WL_ALLOC,
	WL_FREE,
	WL_COMMIT,
	WL_NR_OPS,
};

static const char *const wl_key[WL_NR_OPS] = {
	"hash", "lookup", "alloc", "free", "commit",
};

struct wl_live {
	kv_block_t	*ids;
	uint32_t	nr;
};

/* What one run measured. */
struct wl_run {
	struct bench_lat lat[WL_NR_OPS];
	uint64_t	wall_ns;
	uint64_t	requests;
	uint64_t	looked_up;	/* hashes sent in LOOKUPs */
	uint64_t	hit_blocks;
	uint64_t	allocated;
	uint64_t	released;
	uint64_t	prompt_tokens;
	uint64_t	hit_tokens;
	uint64_t	forced;
	uint32_t	pool_blocks;	/* the namespace's, as kvd says */
};

/* The medians that are reported. */
struct wl_median {
	double		req_per_s;
	double		block_ops_per_s;
	double		hit_token_frac;
	double		forced;
	double		p50[WL_NR_OPS], p99[WL_NR_OPS];
};

/* A run's working state: the ring of live requests and scratch arrays. */
struct wl_state {
	struct kv_client *c;
	struct wl_run	*run;
	struct wl_live	live[WL_LIVE];
	unsigned	head, nr_live;
	struct kv_hash	*hashes;
	struct kv_commit *entries;
	kv_block_t	*ids;
	uint32_t	max_blocks;	/* of the longest request */
	unsigned	bt;
};

static int wl_block_tokens(const char *path, unsigned *bt)
{
	unsigned char h[24];
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f) {
		fprintf(stderr, "kvbench: %s: %s\n", path, strerror(errno));
		return -1;
	}
	n = fread(h, 1, sizeof(h), f);
	fclose(f);
	if (n != sizeof(h) || memcmp(h, "KVDTRC01", 8)) {
		fprintf(stderr, "kvbench: %s: not a kvdtrc file\n", path);
		return -1;
	}
	*bt = h[12] | h[13] << 8 | h[14] << 16 | (unsigned)h[15] << 24;
	if (!*bt || *bt > 1024) {
		fprintf(stderr, "kvbench: %s: block size %u\n", path, *bt);
		return -1;
	}
	return 0;
}

static int wl_free_oldest(struct wl_state *s)
{
	struct wl_live *l = &s->live[s->head];
	uint64_t t0 = bench_now_ns();
	int ret = kv_release(s->c, l->ids, l->nr);

	bench_lat_add(&s->run->lat[WL_FREE], bench_now_ns() - t0);
	if (ret != (int)l->nr) {
		fprintf(stderr, "kvbench: RELEASE of %u blocks: %s\n", l->nr,
			strerror(ret < 0 ? -ret : EPROTO));
		return -1;
	}
	s->run->released += l->nr;
	s->head = (s->head + 1) % WL_LIVE;
	s->nr_live--;
	return 0;
}

/*
 * ALLOC @need blocks into ids; -ENOSPC frees the oldest and retries. A
 * prompt of whole blocks that all hit needs none: no round trip and no
 * sample.
 */
static int wl_alloc(struct wl_state *s, kv_block_t *ids, unsigned need)
{
	uint64_t spent = 0, t0;
	int ret;

	if (!need)
		return 0;
	for (;;) {
		t0 = bench_now_ns();
		ret = kv_alloc(s->c, need, ids);
		spent += bench_now_ns() - t0;
		if (ret != -ENOSPC || !s->nr_live)
			break;
		s->run->forced++;
		if (wl_free_oldest(s))
			return -1;
	}
	bench_lat_add(&s->run->lat[WL_ALLOC], spent);
	if (ret != (int)need) {
		fprintf(stderr, "kvbench: ALLOC of %u blocks: %s\n", need,
			strerror(ret < 0 ? -ret : EPROTO));
		return -1;
	}
	s->run->allocated += need;
	return 0;
}

/* COMMIT full blocks [from, to): each chained to the one before. */
static int wl_commit(struct wl_state *s, unsigned from, unsigned to)
{
	uint64_t t0;
	int ret;

	if (from >= to)
		return 0;
	for (unsigned j = from; j < to; j++) {
		struct kv_commit *e = &s->entries[j - from];

		memset(e, 0, sizeof(*e));
		e->id = s->ids[j];
		e->hash = s->hashes[j];
		if (j)
			e->parent = s->hashes[j - 1];
	}
	t0 = bench_now_ns();
	ret = kv_commit(s->c, s->entries, to - from);
	bench_lat_add(&s->run->lat[WL_COMMIT], bench_now_ns() - t0);
	if (ret != (int)(to - from)) {
		fprintf(stderr, "kvbench: COMMIT of %u blocks: %s\n", to - from,
			strerror(ret < 0 ? -ret : EPROTO));
		return -1;
	}
	/* A block already cached: kvd took a ref on it instead of ours. */
	for (unsigned j = from; j < to; j++)
		s->ids[j] = s->entries[j - from].id;
	return 0;
}

static int wl_request(struct wl_state *s, const struct kvb_trace *tr,
		      size_t i)
{
	const struct kvb_treq *r = &tr->reqs[i];
	const uint32_t *tok = tr->tokens + r->first;
	unsigned nfull = r->in_len / s->bt;
	unsigned nblk = (r->in_len + s->bt - 1) / s->bt;
	struct wl_live *l;
	uint64_t t0;
	int h = 0, ret;

	if (s->nr_live == WL_LIVE && wl_free_oldest(s))
		return -1;

	t0 = bench_now_ns();
	ret = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, tok, r->in_len,
			     s->bt, NULL, s->hashes);
	bench_lat_add(&s->run->lat[WL_HASH], bench_now_ns() - t0);
	if (ret != (int)nfull) {
		fprintf(stderr, "kvbench: kv_hash_blocks: %s\n",
			strerror(ret < 0 ? -ret : EPROTO));
		return -1;
	}
	if (nfull) {
		t0 = bench_now_ns();
		h = kv_lookup(s->c, s->hashes, nfull, s->ids);
		bench_lat_add(&s->run->lat[WL_LOOKUP], bench_now_ns() - t0);
		if (h < 0) {
			fprintf(stderr, "kvbench: LOOKUP of %u hashes: %s\n",
				nfull, strerror(-h));
			return -1;
		}
		s->run->looked_up += nfull;
		s->run->hit_blocks += (unsigned)h;
	}
	if (wl_alloc(s, s->ids + h, nblk - (unsigned)h) ||
	    wl_commit(s, (unsigned)h, nfull))
		return -1;
	s->run->prompt_tokens += r->in_len;
	s->run->hit_tokens += (uint64_t)h * s->bt;
	s->run->requests++;

	l = &s->live[(s->head + s->nr_live) % WL_LIVE];
	memcpy(l->ids, s->ids, nblk * sizeof(*l->ids));
	l->nr = nblk;
	s->nr_live++;
	return 0;
}

static int wl_state_init(struct wl_state *s, const struct kvb_trace *tr,
			 unsigned bt, struct wl_run *run)
{
	memset(s, 0, sizeof(*s));
	s->bt = bt;
	s->run = run;
	s->max_blocks = (tr->max_in + bt - 1) / bt + 1;
	s->hashes = calloc(s->max_blocks, sizeof(*s->hashes));
	s->entries = calloc(s->max_blocks, sizeof(*s->entries));
	s->ids = calloc(s->max_blocks, sizeof(*s->ids));
	if (!s->hashes || !s->entries || !s->ids)
		goto err_nomem;
	/* Nothing is allocated while the run is timed. */
	for (unsigned k = 0; k < WL_LIVE; k++) {
		s->live[k].ids = calloc(s->max_blocks, sizeof(kv_block_t));
		if (!s->live[k].ids)
			goto err_nomem;
	}
	for (int k = 0; k < WL_NR_OPS; k++)
		if (bench_lat_init(&run->lat[k], 2 * tr->nr + WL_LIVE))
			return -1;
	return 0;

err_nomem:
	fprintf(stderr, "kvbench: out of memory\n");
	return -1;
}

static void wl_state_free(struct wl_state *s)
{
	for (unsigned k = 0; k < WL_LIVE; k++)
		free(s->live[k].ids);
	free(s->hashes);
	free(s->entries);
	free(s->ids);
}

/* Replay the whole stream once on client @c; every request freed. */
static int wl_replay(struct kv_client *c, const struct kvb_trace *tr,
		     unsigned bt, struct wl_run *run)
{
	struct wl_state s;
	uint64_t t0;
	int ret = -1;

	if (wl_state_init(&s, tr, bt, run))
		goto out;
	s.c = c;
	t0 = bench_now_ns();
	for (size_t i = 0; i < tr->nr; i++)
		if (wl_request(&s, tr, i))
			goto out;
	while (s.nr_live)
		if (wl_free_oldest(&s))
			goto out;
	run->wall_ns = bench_now_ns() - t0;
	ret = 0;
out:
	wl_state_free(&s);
	return ret;
}

/* One run on an empty cache: a fresh private kvd, or an evicted one. */
static int wl_run_one(const struct kvb_opts *o, const struct kvb_trace *tr,
		      unsigned bt, const char *admin, struct wl_run *run)
{
	struct kv_geometry g = bench_small_geom();
	struct bench_kvd k = { 0 };
	const char *sock = o->socket;
	struct kv_pool_info pi;
	struct kv_client *c;
	char pool[32];
	int ret = -1;

	g.block_tokens = bt;
	if (!sock) {
		snprintf(pool, sizeof(pool), "%llu",
			 (unsigned long long)WL_POOL_BLOCKS *
			 kv_geometry_block_bytes(&g));
		if (bench_kvd_start(&k, o->kvd_bin, pool, NULL))
			return -1;
		sock = k.sock;
	} else if (bench_kvd_evict(admin)) {
		return -1;
	}
	if (bench_connect(sock, WL_MODEL, &g, &c))
		goto out_stop;
	kv_pool_info(c, &pi);
	run->pool_blocks = pi.max_blocks;
	ret = wl_replay(c, tr, bt, run);
	kv_disconnect(c);
	for (int i = 0; i < WL_NR_OPS; i++)
		bench_lat_sort(&run->lat[i]);
out_stop:
	if (!o->socket)
		bench_kvd_stop(&k);
	return ret;
}

static void wl_median(struct wl_run *runs, unsigned n, struct wl_median *m)
{
	double v[KVB_MAX_RUNS];
	unsigned r;

#define WL_MED(expr, dst) do {				\
		for (r = 0; r < n; r++)			\
			v[r] = (expr);			\
		(dst) = bench_median(v, n);		\
	} while (0)
	WL_MED(runs[r].requests * 1e9 / runs[r].wall_ns, m->req_per_s);
	WL_MED((runs[r].looked_up + runs[r].allocated + runs[r].released) *
	       1e9 / runs[r].wall_ns, m->block_ops_per_s);
	WL_MED((double)runs[r].hit_tokens / runs[r].prompt_tokens,
	       m->hit_token_frac);
	WL_MED((double)runs[r].forced, m->forced);
	for (int k = 0; k < WL_NR_OPS; k++) {
		WL_MED(bench_lat_pct(&runs[r].lat[k], 50), m->p50[k]);
		WL_MED(bench_lat_pct(&runs[r].lat[k], 99), m->p99[k]);
	}
#undef WL_MED
}

/* Exactly the README's JSON form. */
static void wl_emit_json(FILE *f, const struct wl_median *m)
{
	struct kv_emit e;

	kv_emit_begin(&e, f, true);
	kv_emit_str(&e, "peer", NULL, "kvd");
	kv_emit_str(&e, "version", NULL, KV_VERSION);
	kv_emit_obj_begin(&e, "median", NULL);
	kv_emit_f64(&e, "req_per_s", NULL, m->req_per_s);
	kv_emit_f64(&e, "block_ops_per_s", NULL, m->block_ops_per_s);
	kv_emit_f64(&e, "hit_token_frac", NULL, m->hit_token_frac);
	kv_emit_obj_begin(&e, "ops", NULL);
	for (int k = WL_HASH; k <= WL_FREE; k++) {
		kv_emit_obj_begin(&e, wl_key[k], NULL);
		kv_emit_f64(&e, "p50_ns", NULL, m->p50[k]);
		kv_emit_f64(&e, "p99_ns", NULL, m->p99[k]);
		kv_emit_obj_end(&e);
	}
	kv_emit_obj_end(&e);
	kv_emit_obj_end(&e);
	kv_emit_end(&e);
}

static const struct kv_emit_col wl_cols[] = {
	{ "run", "run", -6 }, { "req_per_s", "req/s", 10 },
	{ "block_ops_per_s", "blk ops/s", 11 }, { "hit", "hit tok", 8 },
	{ "forced", "forced", 6 }, { "hash", "hash p50", 9 },
	{ "lookup", "lookup p50", 10 }, { "alloc", "alloc p50", 9 },
	{ "free", "free p50", 9 }, { "commit", "commit p50", 10 },
};

static void wl_emit_row(struct kv_emit *e, const char *name, double rps,
			double bops, double hit, double forced,
			const double *p50)
{
	kv_emit_row_begin(e);
	kv_emit_cell_str(e, name);
	kv_emit_cell_f64(e, rps);
	kv_emit_cell_f64(e, bops);
	kv_emit_cell_f64(e, hit);
	kv_emit_cell_f64(e, forced);
	for (int k = 0; k < WL_NR_OPS; k++)
		kv_emit_cell_f64(e, p50[k] / 1e3);
	kv_emit_row_end(e);
}

/*
 * What an infinite cache could hit on the stream (offline): kvd's block
 * granularity, and a radix tree's token granularity beside it.
 */
static void wl_emit_bound(struct kv_emit *e, const struct kvb_bound *b,
			  unsigned bt, const struct wl_median *m)
{
	kv_emit_obj_begin(e, "bound", "infinite cache (offline)");
	kvb_emit_frac(e, "hit_token_frac", "kvd hit tokens (median)",
		      m->hit_token_frac);
	kvb_emit_frac(e, "bound_tokens", "bound (tokens)",
		      ratio(b->hits * bt, b->prompt_tokens));
	kvb_emit_token_bound(e, b, bt);
	kv_emit_obj_end(e);
}

static void wl_report(const struct kvb_opts *o, const struct kvb_trace *tr,
		      const struct kvb_bound *b, unsigned bt,
		      struct wl_run *runs, const struct wl_median *m)
{
	struct kv_emit e;
	char name[16];

	kv_emit_begin(&e, stdout, false);
	kv_emit_obj_begin(&e, "workload", "workload");
	kv_emit_str(&e, "trace", "trace", o->mode_arg);
	kv_emit_u64(&e, "requests", "requests", tr->nr);
	kv_emit_u64(&e, "pool_blocks", "pool blocks", runs[0].pool_blocks);
	kv_emit_u64(&e, "live", "live requests", WL_LIVE);
	kv_emit_str(&e, "kvd", "kvd", o->socket ? o->socket :
		    "private, a fresh one per run");
	kv_emit_str(&e, "cache", "each run starts", o->socket ?
		    "after kvctl evict (KV_ADMIN_EVICT)" : "on a fresh kvd");
	kv_emit_u64(&e, "runs", "runs (median reported)", o->runs);
	kv_emit_obj_end(&e);
	kv_emit_obj_begin(&e, "runs", "runs (latency p50 in us)");
	kv_emit_table_begin(&e, "runs", wl_cols, 10);
	for (unsigned r = 0; r < o->runs; r++) {
		struct wl_run *w = &runs[r];
		double p50[WL_NR_OPS];

		for (int k = 0; k < WL_NR_OPS; k++)
			p50[k] = bench_lat_pct(&w->lat[k], 50);
		snprintf(name, sizeof(name), "%u", r + 1);
		wl_emit_row(&e, name, w->requests * 1e9 / w->wall_ns,
			    (w->looked_up + w->allocated + w->released) *
			    1e9 / w->wall_ns,
			    (double)w->hit_tokens / w->prompt_tokens,
			    (double)w->forced, p50);
	}
	wl_emit_row(&e, "median", m->req_per_s, m->block_ops_per_s,
		    m->hit_token_frac, m->forced, m->p50);
	kv_emit_table_end(&e);
	kv_emit_obj_end(&e);
	kv_emit_obj_begin(&e, "median", "median");
	kv_emit_f64(&e, "req_per_s", "requests/s", m->req_per_s);
	kv_emit_f64(&e, "block_ops_per_s", "block ops/s", m->block_ops_per_s);
	kv_emit_f64(&e, "hit_token_frac", "hit token fraction",
		    m->hit_token_frac);
	for (int k = 0; k < WL_NR_OPS; k++) {
		char l[48];

		snprintf(l, sizeof(l), "%s p50 / p99 (us)", wl_key[k]);
		kv_emit_obj_begin(&e, wl_key[k], l);
		kv_emit_f64(&e, "p50_us", "p50", m->p50[k] / 1e3);
		kv_emit_f64(&e, "p99_us", "p99", m->p99[k] / 1e3);
		kv_emit_obj_end(&e);
	}
	kv_emit_obj_end(&e);
	wl_emit_bound(&e, b, bt, m);
	kv_emit_end(&e);
	printf("block ops = hashes looked up + blocks allocated + blocks released\n");
}

int kvb_mode_workload(struct kvb_opts *o)
{
	struct kvb_trace tr = { 0 };
	struct wl_run *runs = NULL;
	struct kvb_bound b;
	struct wl_median m;
	char admin[108] = "";
	unsigned bt, r;
	FILE *json;
	int ret = 1;

	if (wl_block_tokens(o->mode_arg, &bt) ||
	    kvb_trace_load(&tr, o->mode_arg, 0, bt) ||
	    tr.kind != KVB_TRACE_TOKENS) {
		if (tr.reqs && tr.kind != KVB_TRACE_TOKENS)
			fprintf(stderr, "kvbench: --workload takes a kvdtrc file\n");
		kvb_trace_free(&tr);
		return 2;
	}
	/* offline, before kvd is timed */
	ret = kvb_trace_bound(&tr, bt, &b);
	if (ret) {
		fprintf(stderr, "kvbench: the bound: %s\n", strerror(-ret));
		ret = 1;
		goto out;
	}
	ret = 1;
	if (o->socket && bench_admin_beside(o->socket, admin, sizeof(admin)))
		goto out;
	if (o->admin_socket)
		snprintf(admin, sizeof(admin), "%s", o->admin_socket);
	runs = calloc(o->runs, sizeof(*runs));
	if (!runs)
		goto out;
	for (r = 0; r < o->runs; r++)
		if (wl_run_one(o, &tr, bt, admin, &runs[r]))
			goto out;
	if (runs[0].pool_blocks != WL_POOL_BLOCKS)
		fprintf(stderr, "kvbench: warning: the pool holds %u blocks of this geometry, the workload's lifecycle %u\n",
			runs[0].pool_blocks, WL_POOL_BLOCKS);
	wl_median(runs, o->runs, &m);
	if (!o->quiet)
		wl_report(o, &tr, &b, bt, runs, &m);
	ret = 0;
	if (!o->json_path)
		goto out;
	json = kvb_json_open(o->json_path);
	if (json)
		wl_emit_json(json, &m);
	if (!json || kvb_json_close(o->json_path, json))
		ret = 1;
out:
	for (r = 0; runs && r < o->runs; r++)
		for (int k = 0; k < WL_NR_OPS; k++)
			bench_lat_free(&runs[r].lat[k]);
	free(runs);
	kvb_trace_free(&tr);
	return ret;
}
