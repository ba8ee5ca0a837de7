// SPDX-License-Identifier: MIT
/*
 * The replay's sections of the report: its configuration, the trace, the
 * hit ratio against the infinite-cache bound (split into the pool's and
 * the tiers' hits), the host and disk tiers, the promotion pass against
 * fio, memory, the allocators compared over the same schedule, and one
 * row per process.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "report_replay.h"
#include "report_num.h"

/* With --models, a model column after pid. */
static const struct kv_emit_col replay_model_col = { "model", "model", 5 };

static const struct kv_emit_col replay_cols[] = {
	{ "proc",		"proc",		4 },
	{ "pid",		"pid",		8 },
	{ "requests",		"requests",	8 },
	{ "requests_per_s",	"req/s",	9 },
	{ "hit_ratio_blocks",	"hit ratio (blocks)", 18 },
	{ "hit_ratio_pool_blocks", "pool",	6 },
	{ "hit_ratio_host_blocks", "host tier",	9 },
	{ "hit_ratio_disk_blocks", "disk tier",	9 },
	{ "open_p50_us",	"open p50us",	10 },
	{ "open_p99_us",	"open p99us",	10 },
	{ "append_p50_us",	"app p50us",	9 },
	{ "close_p50_us",	"close p50us",	11 },
	{ "forced",		"forced",	7 },
	{ "stamp_errors",	"errors",	6 },
	{ "status",		"status",	6 },
};

/* The model and its geometry: the load's config and the replay's. */
void kvb_emit_geometry(struct kv_emit *e, const struct kvb_opts *o,
		       const struct agg *a)
{
	kv_emit_str(e, "model", "model", o->model);
	kv_emit_u64(e, "layers", "layers", o->geom.layers);
	kv_emit_u64(e, "kv_heads", "kv heads", o->geom.kv_heads);
	kv_emit_u64(e, "head_dim", "head dim", o->geom.head_dim);
	kv_emit_u64(e, "block_tokens", "block tokens", o->geom.block_tokens);
	kv_emit_str(e, "dtype", "dtype", o->dtype_name);
	kv_emit_str(e, "quant", "scales", kvb_quant_name(o->geom.quant));
	kvb_emit_bytes(e, "block_bytes", "block size", a->info[0].block_bytes);
	/* what the pool holds in this geometry, as kvd counts it */
	kv_emit_u64(e, "pool_tokens", "tokens the pool holds",
		    (uint64_t)a->info[0].max_blocks * o->geom.block_tokens);
}

/* One row per process; with --models, its model after pid. */
void kvb_emit_replay_procs(struct kv_emit *e, const struct kvb_opts *o,
			   const struct child *ch, unsigned n)
{
	struct kv_emit_col cols[sizeof(replay_cols) / sizeof(replay_cols[0]) + 1];
	int nc = 0;
	char mdl[16];

	for (size_t k = 0; k < sizeof(replay_cols) / sizeof(replay_cols[0]);
	     k++) {
		cols[nc++] = replay_cols[k];
		if (k == 1 && o->models > 1)
			cols[nc++] = replay_model_col;
	}
	kv_emit_table_begin(e, "procs", cols, nc);
	for (unsigned i = 0; i < n; i++) {
		const struct kvb_result *r = &ch[i].r;
		uint64_t *const *v = ch[i].samp;

		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, i);
		kv_emit_cell_u64(e, (uint64_t)ch[i].pid);
		if (o->models > 1) {
			snprintf(mdl, sizeof(mdl), "m%u", i % o->models);
			kv_emit_cell_str(e, mdl);
		}
		kv_emit_cell_u64(e, r->requests);
		kv_emit_cell_f64(e, per_s(r->requests,
					  r->t_end_ns - r->t_start_ns));
		kv_emit_cell_f64(e, ratio(r->hit_blocks, r->prompt_blocks));
		kv_emit_cell_f64(e, ratio(r->pool_hit_blocks,
					  r->prompt_blocks));
		kv_emit_cell_f64(e, ratio(r->host_hit_blocks,
					  r->prompt_blocks));
		kv_emit_cell_f64(e, ratio(r->disk_hit_blocks,
					  r->prompt_blocks));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_OPEN],
					   r->op[KVB_OP_OPEN].nr, 50));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_OPEN],
					   r->op[KVB_OP_OPEN].nr, 99));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_APPEND],
					   r->op[KVB_OP_APPEND].nr, 50));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_CLOSE],
					   r->op[KVB_OP_CLOSE].nr, 50));
		kv_emit_cell_u64(e, r->forced);
		kv_emit_cell_u64(e, r->bad_blocks);
		kv_emit_cell_str(e, kvb_proc_status(&ch[i]));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

void kvb_emit_replay_config(struct kv_emit *e, const struct kvb_opts *o,
			    const struct agg *a)
{
	const struct kvb_trace *tr = o->tr;
	char salt[24];

	snprintf(salt, sizeof(salt), "%llu", (unsigned long long)o->salt);
	kv_emit_obj_begin(e, "config", "config");
	kv_emit_u64(e, "procs", "processes", o->procs);
	kv_emit_u64(e, "live", "live per process", o->live);
	kv_emit_str(e, "workload", "workload", kvb_trace_fmt_name(tr->fmt));
	kv_emit_str(e, "trace", "trace", tr->path ? tr->path : "(built in)");
	if (tr->fmt == KVB_FMT_SYNTHETIC)
		kv_emit_u64(e, "seed", "seed", o->seed);
	if (tr->fmt == KVB_FMT_MOONCAKE)
		kv_emit_u64(e, "trace_block", "trace block (tokens)",
			    tr->trace_block);
	kv_emit_u64(e, "limit", "limit", o->limit);
	kv_emit_str(e, "host_tier_size", "host tier (private kvd)",
		    !o->private_pool ? "kvd's own (see kvctl tiers)" :
		    o->host_tier ? o->host_tier : "none");
	if (o->private_pool)
		kv_emit_str(e, "disk_tier_size", "disk tier (private kvd)",
			    o->disk_tier ? o->disk_tier : "none");
	if (o->disk_tier)
		kv_emit_str(e, "disk_tier_path", "disk tier file",
			    o->disk_tier_path ? o->disk_tier_path :
			    "in kvbench's temp dir (removed)");
	kv_emit_u64(e, "decode_chunk", "decode chunk (tokens)",
		    o->decode_chunk);
	kv_emit_f64(e, "timestamps", "timestamp scale (0 off)",
		    o->timestamps ? o->ts_scale : 0);
	/* A string: JSON numbers lose u64 precision in most readers. */
	kv_emit_str(e, "salt", "hash salt", salt);
	kvb_emit_geometry(e, o, a);
	if (o->models > 1 || o->sample_ms) {
		kv_emit_u64(e, "models", "models", o->models);
		kv_emit_str(e, "models_are", "models are",
			    "model k: id MODEL-mk (model 0: MODEL), (k + 1) * layers; each replays the whole stream");
	}
	if (o->models > 1) {
		kv_emit_u64(e, "phase_requests", "requests per phase",
			    o->phase_requests);
		kv_emit_u64(e, "phases", "phases (all models)", o->phases);
		kv_emit_str(e, "schedule", "schedule",
			    "phase p: model p % models replays its requests from (p / models) * requests per phase on, the others idle");
	}
	if (o->sample_ms) {
		kv_emit_u64(e, "sample_ms", "sample every (ms)", o->sample_ms);
		kv_emit_str(e, "admin_socket", "admin socket", o->admin_path);
	}
	kv_emit_obj_end(e);
}

void kvb_emit_trace(struct kv_emit *e, const struct kvb_opts *o)
{
	const struct kvb_trace *tr = o->tr;

	kv_emit_obj_begin(e, "trace", "trace");
	kv_emit_u64(e, "requests", "requests", tr->nr);
	kvb_emit_fixed(e, "span_s", "span", (double)tr->span_us / 1e6, 1, "s");
	kv_emit_u64(e, "prompt_tokens", "prompt tokens", tr->sum_in);
	kv_emit_u64(e, "output_tokens", "output tokens", tr->sum_out);
	kv_emit_u64(e, "max_prompt", "longest prompt", tr->max_in);
	kv_emit_u64(e, "max_output", "longest output", tr->max_out);
	kv_emit_obj_end(e);
}

/* A u64 counter of struct kv_stats at @off: over the run, all models. */
static uint64_t kvd_delta(const struct kvb_opts *o, const struct agg *a,
			  size_t off)
{
	uint64_t sum = 0, x, y;

	for (unsigned m = 0; m < o->models; m++) {
		memcpy(&x, (const char *)&a->after[m] + off, sizeof(x));
		memcpy(&y, (const char *)&a->before[m] + off, sizeof(y));
		sum += x - y;
	}
	return sum;
}

void kvb_emit_replay_results(struct kv_emit *e, const struct kvb_opts *o,
			     const struct agg *a)
{
	const struct kvb_result *s = &a->sum;
	const struct kvb_bound *b = &a->bound;
	unsigned bt = o->geom.block_tokens;
	uint64_t wall = a->t_end - a->t_start;
	double hit = ratio(s->hit_blocks, s->prompt_blocks);
	double bound = ratio(b->hits, b->refs);

	kv_emit_obj_begin(e, "results", "results");
	kv_emit_u64(e, "requests", "requests", s->requests);
	kvb_emit_fixed(e, "wall_s", "wall time", (double)wall / 1e9, 2, "s");
	kvb_emit_fixed(e, "requests_per_s", "requests/s",
		       per_s(s->requests, wall), 0, NULL);
	kv_emit_u64(e, "prompt_tokens", "prompt tokens", s->prompt_tokens);
	kv_emit_u64(e, "hit_tokens", "hit tokens", s->hit_tokens);
	kvb_emit_frac(e, "hit_ratio_tokens", "hit ratio (tokens)",
		      ratio(s->hit_tokens, s->prompt_tokens));
	kvb_emit_frac(e, "bound_tokens", "bound (tokens)",
		      ratio(b->hits * bt, b->prompt_tokens));
	kvb_emit_token_bound(e, b, bt);
	kv_emit_u64(e, "prompt_blocks", "prompt full blocks", s->prompt_blocks);
	kv_emit_u64(e, "hit_blocks", "hit blocks", s->hit_blocks);
	kvb_emit_frac(e, "hit_ratio_blocks", "hit ratio (blocks)", hit);
	kvb_emit_frac(e, "bound_blocks", "bound (blocks)", bound);
	kvb_emit_fixed(e, "bound_gap", "bound - hit ratio", bound - hit, 4,
		       NULL);
	/* the hit blocks by where kvd found them (kv_seq_hits) */
	kv_emit_u64(e, "pool_hit_blocks", "pool hit blocks",
		    s->pool_hit_blocks);
	kv_emit_u64(e, "host_hit_blocks", "host tier hit blocks",
		    s->host_hit_blocks);
	kv_emit_u64(e, "disk_hit_blocks", "disk tier hit blocks",
		    s->disk_hit_blocks);
	kvb_emit_frac(e, "hit_ratio_pool_blocks", "hit ratio, pool",
		      ratio(s->pool_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "hit_ratio_host_blocks", "hit ratio, host tier",
		      ratio(s->host_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "hit_ratio_disk_blocks", "hit ratio, disk tier",
		      ratio(s->disk_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "hit_ratio_total_blocks", "hit ratio, total", hit);
	kv_emit_u64(e, "kvd_lookups", "kvd lookups",
		    kvd_delta(o, a, offsetof(struct kv_stats, lookups)));
	kv_emit_u64(e, "kvd_hit_blocks", "kvd hit blocks",
		    kvd_delta(o, a, offsetof(struct kv_stats, hit_blocks)));
	kv_emit_u64(e, "evictions", "evictions",
		    kvd_delta(o, a, offsetof(struct kv_stats, evictions)));
	kv_emit_u64(e, "output_tokens", "output tokens", s->output_tokens);
	kv_emit_u64(e, "enospc", "-ENOSPC answers", s->enospc);
	kv_emit_u64(e, "forced", "forced closes", s->forced);
	kv_emit_u64(e, "preempted", "preempted (redone)", s->preempted);
	kv_emit_u64(e, "enospc_waits", "waits for room", s->waits);
	kv_emit_u64(e, "stamp_errors", "stamp errors (blocks)",
		    s->bad_blocks);
	kv_emit_obj_end(e);
}

/*
 * Beside the block-granular bound: the token-granular one (a radix tree
 * that splits at the exact token two requests differ in), and what the
 * blocks cost. A trace of block hashes has no tokens to say it from.
 */
void kvb_emit_token_bound(struct kv_emit *e, const struct kvb_bound *b,
			  unsigned bt)
{
	double tok = ratio(b->token_hits, b->prompt_tokens);

	if (!b->have_tokens) {
		kv_emit_str(e, "token_bound_note", "token bound (radix tree)",
			    "not available: the trace has block hashes, no tokens");
		return;
	}
	kvb_emit_frac(e, "token_bound_tokens", "token bound (radix tree)",
		      tok);
	kvb_emit_fixed(e, "block_granularity_cost", "block granularity cost",
		       tok - ratio(b->hits * bt, b->prompt_tokens), 4, NULL);
}

void kvb_emit_bound(struct kv_emit *e, const struct agg *a)
{
	const struct kvb_bound *b = &a->bound;

	kv_emit_obj_begin(e, "bound", "infinite cache (offline)");
	kvb_emit_frac(e, "hit_ratio_blocks", "hit ratio (blocks)",
		      ratio(b->hits, b->refs));
	kv_emit_u64(e, "refs", "prompt block references", b->refs);
	kv_emit_u64(e, "unique", "distinct prompt blocks", b->unique);
	kv_emit_u64(e, "footprint_blocks", "blocks committed in all",
		    b->footprint);
	if (b->have_tokens) {
		kv_emit_u64(e, "token_hits", "radix: prompt tokens hit",
			    b->token_hits);
		kv_emit_u64(e, "radix_tokens", "radix: tokens held",
			    b->radix_tokens);
		kv_emit_u64(e, "radix_nodes", "radix: nodes",
			    b->radix_nodes);
	}
	kv_emit_obj_end(e);
}

/* A tier's record of kvctl tiers, as kvd counted it over the run. */
static void emit_tier(struct kv_emit *e, const struct kv_admin_tier *t,
		      bool disk)
{
	kvb_emit_bytes(e, "cap_bytes", "size", t->cap_bytes);
	kvb_emit_bytes(e, "used_bytes", "used at the end", t->used_bytes);
	kv_emit_u64(e, "blocks", "blocks held at the end", t->blocks);
	kv_emit_u64(e, "demotions", disk ? "taken in (host tier spilled)" :
		    "taken in (pool evicted)", t->demotions);
	kv_emit_u64(e, "promotions", disk ? "read back (into the host tier)" :
		    "brought back (hits)", t->promotions);
	kv_emit_u64(e, "lookups", "lookups that asked it", t->lookups);
	kv_emit_u64(e, "drops", disk ? "dropped for room or staging" :
		    "dropped for room", t->drops);
	kv_emit_u64(e, "corrupt", "dropped: bad checksum", t->corrupt);
	kv_emit_u64(e, "replaced", "taken in again", t->replaced);
	if (!disk)
		return;
	kv_emit_u64(e, "errors", "I/O errors", t->errors);
	kvb_emit_fixed(e, "read_p50_us", "read p50 (issue to completion)",
		       t->read_p50_us, 0, "us");
	kvb_emit_fixed(e, "read_p99_us", "read p99", t->read_p99_us, 0, "us");
	kvb_emit_fixed(e, "write_p50_us", "write p50", t->write_p50_us, 0,
		       "us");
	kvb_emit_fixed(e, "write_p99_us", "write p99", t->write_p99_us, 0,
		       "us");
}

/* --host-tier-size: the private kvd's tier over the run (kvctl tiers). */
void kvb_emit_host_tier(struct kv_emit *e, const struct agg *a)
{
	kv_emit_obj_begin(e, "host_tier", "host tier (kvd)");
	emit_tier(e, &a->tier, false);
	kv_emit_obj_end(e);
}

/* --disk-tier-size: the private kvd's disk tier over the run. */
void kvb_emit_disk_tier(struct kv_emit *e, const struct agg *a)
{
	const struct kvb_result *s = &a->sum;

	kv_emit_obj_begin(e, "disk_tier", "disk tier (kvd)");
	emit_tier(e, &a->disk_tier, true);
	/* of the hits, the disk's: what the pool and host tier lacked */
	kvb_emit_frac(e, "share_of_hits", "its share of the hits",
		      ratio(s->disk_hit_blocks, s->hit_blocks));
	kv_emit_obj_end(e);
}

static const char *fio_state(enum kvb_fio_state f)
{
	return f == KVB_FIO_OK ? "ok" : f == KVB_FIO_ABSENT ? "not installed" :
	       f == KVB_FIO_FAILED ? "failed" : "skipped";
}

static void emit_fio(struct kv_emit *e, const struct kvb_promo *p,
		     double io_bw, double bw)
{
	kv_emit_str(e, "fio", "fio", fio_state(p->fio));
	kv_emit_str(e, "fio_dir", "fio: directory (disk tier's)", p->fio_dir);
	if (p->fio != KVB_FIO_OK) {
		kv_emit_str(e, "fio_note", "fio: why", p->fio_why);
		return;
	}
	kvb_emit_bytes(e, "fio_bs", "fio: block size (kvd's read)", p->fio_bs);
	kv_emit_u64(e, "fio_iodepth", "fio: iodepth", p->depth);
	kvb_emit_bytes(e, "fio_size", "fio: bytes read (each bs)",
		       p->fio_size);
	kvb_emit_fixed(e, "fio_seq_read_MBps", "fio seq read at kvd's bs",
		       p->fio_bw / 1e6, 1, "MB/s");
	kvb_emit_fixed(e, "fio_seq_read_1M_MBps", "fio seq read at 1 MiB",
		       p->fio_bw_1m / 1e6, 1, "MB/s");
	kvb_emit_fixed(e, "promotion_vs_fio", "promotion / fio (block bytes)",
		       p->fio_bw > 0 ? bw / p->fio_bw : 0, 4, NULL);
	kvb_emit_fixed(e, "promotion_io_vs_fio", "promotion / fio (bytes read)",
		       p->fio_bw > 0 ? io_bw / p->fio_bw : 0, 4, NULL);
	kvb_emit_fixed(e, "promotion_io_vs_fio_1M", "promotion / fio at 1 MiB",
		       p->fio_bw_1m > 0 ? io_bw / p->fio_bw_1m : 0, 4, NULL);
}

/*
 * --disk-tier-size: the promotion pass (promote.c): its bandwidth in
 * block bytes and in bytes read (whole 4 KiB runs), over the time the
 * LOOKUPs that read the disk took together and over the pass, against
 * fio's sequential read in the same run (fio.c). MB: 10^6 bytes.
 */
void kvb_emit_promotion(struct kv_emit *e, const struct kvb_opts *o,
			const struct agg *a)
{
	const struct kvb_promo *p = &a->promo;
	double bytes = (double)p->promotions * (double)p->block_bytes;
	double io = (double)p->promotions * (double)p->read_bytes;
	double busy = (double)p->busy_ns / 1e9, wall = (double)p->wall_ns / 1e9;
	double bw = busy > 0 ? bytes / busy : 0, io_bw = busy > 0 ? io / busy : 0;

	kv_emit_obj_begin(e, "promotion",
			  "promotion pass (disk tier -> host tier -> pool)");
	kv_emit_str(e, "result", "result", p->ran ? "ok" : "FAILED");
	kv_emit_str(e, "method", "method",
		    "after the replay, --procs processes LOOKUP every prompt once more, all at once; bytes = the disk tier's promotions x block bytes, time = union of the LOOKUPs with disk hits");
	kv_emit_u64(e, "processes", "processes", o->procs);
	kv_emit_u64(e, "requests", "prompts looked up", p->requests);
	kv_emit_u64(e, "hit_blocks", "hit blocks", p->hit_blocks);
	kv_emit_u64(e, "host_hit_blocks", "of them, host tier (CQE)",
		    p->host_blocks);
	kv_emit_u64(e, "disk_hit_blocks", "of them, disk tier (CQE)",
		    p->disk_blocks);
	kv_emit_u64(e, "disk_lookups", "LOOKUPs that read the disk",
		    p->disk_lookups);
	kv_emit_u64(e, "disk_promotions", "disk tier promotions",
		    p->promotions);
	kvb_emit_bytes(e, "block_bytes", "block bytes", p->block_bytes);
	kvb_emit_bytes(e, "read_bytes_per_block", "bytes kvd reads per block",
		       p->read_bytes);
	kv_emit_u64(e, "kvd_read_depth", "reads kvd holds at once (staging)",
		    p->depth);
	kvb_emit_fixed(e, "wall_s", "pass wall time", wall, 3, "s");
	kvb_emit_fixed(e, "disk_busy_s", "time of the disk-hit LOOKUPs", busy,
		       3, "s");
	kvb_emit_fixed(e, "promotion_bw_MBps", "promotion bandwidth",
		       bw / 1e6, 1, "MB/s");
	kvb_emit_fixed(e, "promotion_io_MBps", "promotion bandwidth (bytes read)",
		       io_bw / 1e6, 1, "MB/s");
	kvb_emit_fixed(e, "promotion_bw_wall_MBps", "promotion bandwidth over the pass",
		       wall > 0 ? bytes / wall / 1e6 : 0, 1, "MB/s");
	if (p->have_disk) {
		kvb_emit_fixed(e, "read_p50_us", "disk read p50 (since start)",
			       p->disk.read_p50_us, 0, "us");
		kvb_emit_fixed(e, "read_p99_us", "disk read p99 (since start)",
			       p->disk.read_p99_us, 0, "us");
	}
	emit_fio(e, p, io_bw, bw);
	kv_emit_obj_end(e);
}

/*
 * --compare-tier: the run without the tier (o->tier_base) beside this
 * one, with it, on the same pool size, against the bound of the stream.
 */
void kvb_emit_tier_compare(struct kv_emit *e, const struct kvb_opts *o,
			   const struct agg *a)
{
	const struct kvb_tier_base *p = o->tier_base;
	const struct kvb_result *s = &a->sum;
	double bound = ratio(a->bound.hits, a->bound.refs);
	double base = ratio(p->sum.hit_blocks, p->sum.prompt_blocks);
	double tier = ratio(s->hit_blocks, s->prompt_blocks);

	kv_emit_obj_begin(e, "tier_compare", o->disk_tier ?
			  "pool only vs pool + host + disk tiers (same pool, blocks)" :
			  "pool only vs pool + host tier (same pool, blocks)");
	kv_emit_str(e, "pool_size", "pool (both runs)", o->private_pool);
	kv_emit_str(e, "host_tier_size", "host tier (second run)",
		    o->host_tier);
	kv_emit_str(e, "disk_tier_size", "disk tier (second run)",
		    o->disk_tier ? o->disk_tier : "none");
	kv_emit_str(e, "pool_only_result", "pool only: result",
		    p->ok ? "ok" : "FAILED");
	kv_emit_u64(e, "pool_only_requests", "pool only: requests",
		    p->sum.requests);
	kvb_emit_fixed(e, "pool_only_wall_s", "pool only: wall time",
		       (double)p->wall_ns / 1e9, 2, "s");
	kv_emit_u64(e, "pool_only_evictions", "pool only: evictions",
		    p->evictions);
	kvb_emit_frac(e, "pool_only_hit_ratio", "pool only: hit ratio", base);
	kvb_emit_frac(e, "tier_hit_ratio_pool", "with tier: from pool",
		      ratio(s->pool_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "tier_hit_ratio_host", "with tier: from host tier",
		      ratio(s->host_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "tier_hit_ratio_disk", "with tier: from disk tier",
		      ratio(s->disk_hit_blocks, s->prompt_blocks));
	kvb_emit_frac(e, "tier_hit_ratio", "with tier: total", tier);
	kvb_emit_frac(e, "bound", "bound (infinite cache)", bound);
	kvb_emit_fixed(e, "pool_only_bound_gap", "bound - pool only",
		       bound - base, 4, NULL);
	kvb_emit_fixed(e, "tier_bound_gap", "bound - with tier", bound - tier,
		       4, NULL);
	kvb_emit_frac(e, "pool_only_of_bound", "pool only / bound",
		      bound > 0 ? base / bound : 0);
	kvb_emit_frac(e, "tier_of_bound", "with tier / bound",
		      bound > 0 ? tier / bound : 0);
	kv_emit_obj_end(e);
}

void kvb_emit_memory(struct kv_emit *e, const struct kvb_opts *o,
		     const struct agg *a)
{
	const struct kvb_result *s = &a->sum;
	uint64_t slots = s->peak_used * o->geom.block_tokens;

	kv_emit_obj_begin(e, "memory", "memory");
	kv_emit_u64(e, "peak_blocks_used", "peak blocks in use",
		    s->peak_used);
	kvb_emit_bytes(e, "peak_bytes_used", "peak bytes in use",
		       s->peak_used * a->info[0].block_bytes);
	/* of the slots (token positions) allocated: the unused ones */
	kvb_emit_pct(e, "waste_at_peak_pct", "waste at peak",
		     slots ? 100.0 * (double)s->peak_unused / (double)slots : 0);
	kvb_emit_pct(e, "waste_mean_pct", "waste, mean",
		     s->waste_samples ?
		     100.0 * s->waste_sum / (double)s->waste_samples : 0);
	kv_emit_u64(e, "samples", "samples", s->waste_samples);
	kv_emit_str(e, "sampled", "sampled",
		    "after each request's output: kvd's blocks in use (ref > 0), unused slots of all open requests");
	kv_emit_obj_end(e);
}

static void emit_sim(struct kv_emit *e, const char *key, const char *label,
		     const struct kvb_alloc_sim *m, uint64_t tb)
{
	kv_emit_obj_begin(e, key, label);
	kv_emit_u64(e, "peak_live", "live requests at peak", m->peak_live);
	kvb_emit_bytes(e, "static_bytes", "static (max len)",
		       m->static_slots * tb);
	kvb_emit_bytes(e, "chunked_bytes", "chunked (256 tokens)",
		       m->chunked_slots * tb);
	kvb_emit_bytes(e, "paged_bytes", "paged, no sharing",
		       m->paged_slots * tb);
	kvb_emit_bytes(e, "paged_shared_bytes", "paged + sharing (ideal)",
		       m->shared_slots * tb);
	kv_emit_obj_end(e);
}

void kvb_emit_allocators(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a)
{
	const struct kvb_alloc_sim *m = a->have_run ? &a->run : &a->sim;
	uint64_t tb = a->info[0].block_bytes / o->geom.block_tokens;
	uint64_t kvd = a->sum.peak_used * a->info[0].block_bytes;

	kv_emit_obj_begin(e, "allocators", "allocators (peak bytes)");
	kv_emit_u64(e, "max_model_len", "max model len", o->max_model_len);
	kv_emit_u64(e, "chunk_tokens", "chunk (tokens)", KVB_CHUNK_TOKENS);
	kv_emit_u64(e, "bytes_per_token", "bytes per token", tb);
	emit_sim(e, "offline", "offline schedule (i % procs, last --live each)",
		 &a->sim, tb);
	if (a->have_run)
		emit_sim(e, "as_run", "as run (each request from open to close)",
			 &a->run, tb);
	kvb_emit_bytes(e, "kvd_bytes", "kvd (measured)", kvd);
	kv_emit_str(e, "ratios_over", "ratios over",
		    a->have_run ? "as run" : "offline");
	kvb_emit_times(e, "static_vs_kvd", "static / kvd",
		       ratio(m->static_slots * tb, kvd),
		       "(what static allocation needs over what kvd used)");
	kvb_emit_times(e, "chunked_vs_kvd", "chunked / kvd",
		       ratio(m->chunked_slots * tb, kvd), NULL);
	kvb_emit_times(e, "paged_vs_kvd", "paged / kvd",
		       ratio(m->paged_slots * tb, kvd), NULL);
	/* below 1 only where the samples missed the exact peak */
	kvb_emit_times(e, "kvd_vs_ideal", "kvd / ideal sharing",
		       ratio(kvd, m->shared_slots * tb),
		       "(ideal: paged, each shared prefix block stored once; about 1.00x: kvd wastes nothing beyond it)");
	kv_emit_obj_end(e);
}
