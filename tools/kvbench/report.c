// SPDX-License-Identifier: MIT
/*
 * The report of the load and replay modes, as a table on stdout and as
 * JSON (--json), through one emitter (tools/emit.h): the parent adds up
 * the processes' counts and samples, then the configuration, results,
 * latency, pool and per-process sections. The replay's own sections are
 * report_replay.c, the time series series.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../emit.h"
#include "fleet.h"
#include "report.h"
#include "report_num.h"
#include "report_replay.h"
#include "series.h"

static const char *const op_key[KVB_NR_OPS] = {
	"alloc", "release", "hash", "open", "commit", "append", "close",
};

static const char *const op_label[KVB_NR_OPS] = {
	"ALLOC", "RELEASE", "hash", "open (lookup + alloc)", "commit",
	"append", "close",
};

static void sum_result(struct kvb_result *s, const struct kvb_result *r)
{
	s->requests += r->requests;
	s->blocks += r->blocks;
	s->enospc += r->enospc;
	s->forced += r->forced;
	s->waits += r->waits;
	s->bad_blocks += r->bad_blocks;
	s->bad_words += r->bad_words;
	s->bytes_checked += r->bytes_checked;
	s->syscalls += r->syscalls;
	s->serve_ns += r->serve_ns;
	for (int k = 0; k < KVB_NR_OPS; k++) {
		s->op[k].ops += r->op[k].ops;
		s->op[k].sum_ns += r->op[k].sum_ns;
		if (r->op[k].max_ns > s->op[k].max_ns)
			s->op[k].max_ns = r->op[k].max_ns;
	}
	s->prompt_tokens += r->prompt_tokens;
	s->hit_tokens += r->hit_tokens;
	s->prompt_blocks += r->prompt_blocks;
	s->hit_blocks += r->hit_blocks;
	s->output_tokens += r->output_tokens;
	if (r->peak_used > s->peak_used) {
		s->peak_used = r->peak_used;
		s->peak_unused = r->peak_unused;
	}
	s->waste_sum += r->waste_sum;
	s->waste_samples += r->waste_samples;
	s->preempted += r->preempted;
	s->pool_hit_blocks += r->pool_hit_blocks;
	s->host_hit_blocks += r->host_hit_blocks;
	s->disk_hit_blocks += r->disk_hit_blocks;
}

/* Sum counts, merge and sort samples (each process's sorted too). */
int kvb_aggregate(struct agg *a, struct child *ch, unsigned n,
		  unsigned models)
{
	for (int k = 0; k < KVB_NR_OPS; k++) {
		uint64_t total = 0;

		for (unsigned i = 0; i < n; i++)
			if (ch[i].got)
				total += ch[i].r.op[k].nr;
		a->samp[k] = malloc((total + 1) * sizeof(uint64_t));
		if (!a->samp[k])
			return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct kvb_result *r = &ch[i].r;

		if (!ch[i].got)
			continue;
		sum_result(&a->sum, r);
		sum_result(&a->msum[i % models], r);
		if (!a->t_start || r->t_start_ns < a->t_start)
			a->t_start = r->t_start_ns;
		if (r->t_end_ns > a->t_end)
			a->t_end = r->t_end_ns;
		for (int k = 0; k < KVB_NR_OPS; k++) {
			kvb_sort_u64(ch[i].samp[k], r->op[k].nr);
			memcpy(a->samp[k] + a->nsamp[k], ch[i].samp[k],
			       r->op[k].nr * sizeof(uint64_t));
			a->nsamp[k] += r->op[k].nr;
		}
	}
	for (int k = 0; k < KVB_NR_OPS; k++)
		kvb_sort_u64(a->samp[k], a->nsamp[k]);
	return 0;
}

static void emit_config(struct kv_emit *e, const struct kvb_opts *o,
			const struct agg *a)
{
	kv_emit_obj_begin(e, "config", "config");
	kv_emit_u64(e, "procs", "processes", o->procs);
	kv_emit_u64(e, "requests_per_proc", "requests per process",
		    o->requests);
	kv_emit_u64(e, "min_tokens", "min tokens", o->min_tokens);
	kv_emit_u64(e, "max_tokens", "max tokens", o->max_tokens);
	kv_emit_u64(e, "batch", "batch", o->batch);
	kv_emit_u64(e, "live", "live per process", o->live_max);
	kv_emit_u64(e, "seed", "seed", o->seed);
	kvb_emit_geometry(e, o, a);
	kv_emit_obj_end(e);
}

/* kvd's own counts over the run (--perf-stat), per op. */
static void emit_perf(struct kv_emit *e, const struct bench_perf_counts *c,
		      uint64_t ops)
{
	static const char *const key[BENCH_PERF_NR] = {
		"kvd_syscalls_per_op", "kvd_page_faults_per_op",
		"kvd_context_switches_per_op",
	};
	static const char *const label[BENCH_PERF_NR] = {
		"kvd syscalls per op", "kvd page faults per op",
		"kvd ctx switches per op",
	};

	for (int k = 0; k < BENCH_PERF_NR; k++)
		if (c->have[k])
			kvb_emit_fixed(e, key[k], label[k],
				       ops ? (double)c->v[k] / (double)ops : 0,
				       2, NULL);
}

static void emit_results(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a)
{
	const struct kvb_result *s = &a->sum;
	const struct kvb_opstat *al = &s->op[KVB_OP_ALLOC];
	const struct kvb_opstat *rel = &s->op[KVB_OP_RELEASE];
	uint64_t wall = a->t_end - a->t_start;
	uint64_t ops = al->ops + rel->ops;

	kv_emit_obj_begin(e, "results", "results");
	kv_emit_u64(e, "requests", "requests", s->requests);
	kv_emit_u64(e, "ops", "ops (ALLOC + RELEASE)", ops);
	kv_emit_u64(e, "alloc_ops", "ALLOC ops", al->ops);
	kv_emit_u64(e, "release_ops", "RELEASE ops", rel->ops);
	kv_emit_u64(e, "blocks", "blocks allocated", s->blocks);
	kvb_emit_fixed(e, "wall_s", "wall time", (double)wall / 1e9, 2, "s");
	kvb_emit_fixed(e, "ops_per_s", "ops/s", per_s(ops, wall), 0, NULL);
	/* -ENOSPC answers are cheap ops: this one counts only done work. */
	kvb_emit_fixed(e, "requests_per_s", "requests/s",
		       per_s(s->requests, wall), 0, NULL);
	kvb_emit_fixed(e, "blocks_per_s", "blocks/s", per_s(s->blocks, wall),
		       0, NULL);
	/*
	 * One process submitting batches: kvd serves only between a
	 * batch's submit and its last CQE, so blocks over that time is
	 * what kvd's one core does, however slow the client is between
	 * batches (pattern work, bookkeeping).
	 */
	if (o->procs == 1 && o->batch > 1 && s->serve_ns)
		kvb_emit_fixed(e, "serve_blocks_per_s", "blocks/s, kvd serving",
			       per_s(s->blocks, s->serve_ns), 0, NULL);
	/* the ring's promise: no system call per op while both are busy */
	kvb_emit_fixed(e, "syscalls_per_op", "client syscalls per op",
		       ops ? (double)s->syscalls / (double)ops : 0, 2, NULL);
	if (a->have_perf)
		emit_perf(e, &a->perf, ops);
	kv_emit_u64(e, "enospc", "ALLOC -ENOSPC", s->enospc);
	kv_emit_u64(e, "forced", "forced releases", s->forced);
	kv_emit_u64(e, "enospc_waits", "waits for room", s->waits);
	kvb_emit_bytes(e, "bytes_verified", "bytes verified",
		       s->bytes_checked);
	kv_emit_u64(e, "pattern_errors", "pattern errors (blocks)",
		    s->bad_blocks);
	kv_emit_u64(e, "pattern_bad_words", "pattern errors (words)",
		    s->bad_words);
	kv_emit_obj_end(e);
}

static void emit_op_latency(struct kv_emit *e, const struct agg *a,
			    enum kvb_op k)
{
	const struct kvb_opstat *st = &a->sum.op[k];
	const uint64_t *v = a->samp[k];
	uint64_t n = a->nsamp[k];

	kv_emit_obj_begin(e, op_key[k], op_label[k]);
	kvb_emit_fixed(e, "p50", "p50", pct_us(v, n, 50), 1, "us");
	kvb_emit_fixed(e, "p99", "p99", pct_us(v, n, 99), 1, "us");
	kvb_emit_fixed(e, "mean", "mean", st->ops ?
		       (double)st->sum_ns / st->ops / 1e3 : 0, 1, "us");
	kvb_emit_fixed(e, "max", "max", (double)st->max_ns / 1e3, 1, "us");
	kv_emit_u64(e, "samples", "samples", n);
	kv_emit_obj_end(e);
}

static void emit_latency(struct kv_emit *e, const struct kvb_opts *o,
			 const struct agg *a)
{
	kv_emit_obj_begin(e, "latency_us", "latency");
	if (o->mode == KVB_MODE_REPLAY) {
		kv_emit_str(e, "measured", "measured",
			    "per call: one synchronous kv_seq call (hash: client-side hashing of a prompt)");
		for (int k = KVB_OP_HASH; k <= KVB_OP_CLOSE; k++)
			emit_op_latency(e, a, k);
	} else {
		kv_emit_str(e, "measured", "measured",
			    o->batch > 1 ?
			    "per batch: submit to last CQE, counted for each op in it" :
			    "per op: one synchronous round trip");
		emit_op_latency(e, a, KVB_OP_ALLOC);
		emit_op_latency(e, a, KVB_OP_RELEASE);
	}
	kv_emit_obj_end(e);
}

static void emit_pool(struct kv_emit *e, const struct agg *a)
{
	const struct kv_stats *st = a->have_after ? &a->after[0] :
						    &a->before[0];
	uint64_t peak = (uint64_t)st->peak_pages_used * KV_PAGE_BYTES;

	kv_emit_obj_begin(e, "pool", "pool");
	kvb_emit_bytes(e, "pool_bytes", "pool size", st->pool_bytes);
	kv_emit_u64(e, "nr_pages", "pages", st->nr_pages);
	kv_emit_u64(e, "max_blocks", "max blocks", a->info[0].max_blocks);
	kv_emit_u64(e, "pages_used_before", "pages used before",
		    a->before[0].pages_used);
	kv_emit_u64(e, "peak_pages_used", "peak pages used",
		    st->peak_pages_used);
	kvb_emit_bytes(e, "peak_bytes", "peak bytes used", peak);
	kvb_emit_pct(e, "peak_pct", "peak use", st->nr_pages ?
		     100.0 * st->peak_pages_used / st->nr_pages : 0);
	kv_emit_str(e, "peak_scope", "peak scope",
		    a->after[0].peak_pages_used > a->before[0].peak_pages_used ?
		    "this run (kvd's peak since start, raised by it)" :
		    "kvd's peak since start (not exceeded by this run)");
	if (a->have_st1)
		kv_emit_u64(e, "reclaims", "blocks taken by other ns",
			    a->st1.reclaims - a->st0.reclaims);
	kv_emit_obj_end(e);
}

static const struct kv_emit_col proc_cols[] = {
	{ "proc",		"proc",		4 },
	{ "pid",		"pid",		8 },
	{ "requests",		"requests",	8 },
	{ "ops",		"ops",		9 },
	{ "ops_per_s",		"ops/s",	11 },
	{ "alloc_p50_us",	"alloc p50us",	11 },
	{ "alloc_p99_us",	"alloc p99us",	11 },
	{ "release_p50_us",	"rel p50us",	10 },
	{ "release_p99_us",	"rel p99us",	10 },
	{ "max_live_blocks",	"max blocks",	10 },
	{ "forced",		"forced",	7 },
	{ "pattern_errors",	"errors",	6 },
	{ "status",		"status",	6 },
};

static void emit_procs(struct kv_emit *e, const struct child *ch, unsigned n)
{
	kv_emit_table_begin(e, "procs", proc_cols,
			    sizeof(proc_cols) / sizeof(proc_cols[0]));
	for (unsigned i = 0; i < n; i++) {
		const struct kvb_result *r = &ch[i].r;
		const struct kvb_opstat *al = &r->op[KVB_OP_ALLOC];
		const struct kvb_opstat *rel = &r->op[KVB_OP_RELEASE];
		uint64_t *const *v = ch[i].samp;
		uint64_t ops = al->ops + rel->ops;

		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, i);
		kv_emit_cell_u64(e, (uint64_t)ch[i].pid);
		kv_emit_cell_u64(e, r->requests);
		kv_emit_cell_u64(e, ops);
		kv_emit_cell_f64(e, per_s(ops, r->t_end_ns - r->t_start_ns));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_ALLOC], al->nr, 50));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_ALLOC], al->nr, 99));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_RELEASE], rel->nr, 50));
		kv_emit_cell_f64(e, pct_us(v[KVB_OP_RELEASE], rel->nr, 99));
		kv_emit_cell_u64(e, r->max_live_blocks);
		kv_emit_cell_u64(e, r->forced);
		kv_emit_cell_u64(e, r->bad_blocks);
		kv_emit_cell_str(e, kvb_proc_status(&ch[i]));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

/* Mode, configuration, results, latency, pool, then one row per process. */
void kvb_report(FILE *f, bool json, const struct kvb_opts *o,
		const struct agg *a, const struct child *ch, bool ok)
{
	struct kv_emit e;
	char mode[32];

	if (o->mode == KVB_MODE_REPLAY && o->models > 1)
		snprintf(mode, sizeof(mode), "replay, %u models", o->models);
	else if (o->mode == KVB_MODE_REPLAY)
		snprintf(mode, sizeof(mode), "replay");
	else if (o->batch > 1)
		snprintf(mode, sizeof(mode), "batch %u", o->batch);
	else
		snprintf(mode, sizeof(mode), "sync");
	kv_emit_begin(&e, f, json);
	kv_emit_obj_begin(&e, "kvbench", "kvbench");
	kv_emit_str(&e, "command", "command", o->cmdline);
	kv_emit_str(&e, "socket", "socket", o->socket ? o->socket :
		    getenv("KVD_SOCKET") && *getenv("KVD_SOCKET") ?
		    getenv("KVD_SOCKET") : "(libkvclient default)");
	kv_emit_str(&e, "mode", "mode", mode);
	kv_emit_str(&e, "result", "result", ok ? "ok" : "FAILED");
	if (o->mode == KVB_MODE_REPLAY) {
		kvb_emit_replay_config(&e, o, a);
		kvb_emit_trace(&e, o);
		kvb_emit_replay_results(&e, o, a);
		kvb_emit_bound(&e, a);
		if (a->have_tier)
			kvb_emit_host_tier(&e, a);
		if (a->have_disk_tier)
			kvb_emit_disk_tier(&e, a);
		if (a->have_disk_tier && o->disk_tier)
			kvb_emit_promotion(&e, o, a);
		if (o->tier_base && o->tier_base->have && o->host_tier)
			kvb_emit_tier_compare(&e, o, a);
		if (o->sample_ms) {
			kvb_emit_series(&e, o, a);
			kvb_emit_namespaces(&e, o, a);
		}
		if (o->models == 1)
			kvb_emit_memory(&e, o, a);
		if (a->have_sim)
			kvb_emit_allocators(&e, o, a);
	} else {
		emit_config(&e, o, a);
		emit_results(&e, o, a);
	}
	emit_latency(&e, o, a);
	emit_pool(&e, a);
	kv_emit_obj_end(&e);
	if (o->mode == KVB_MODE_REPLAY)
		kvb_emit_replay_procs(&e, o, ch, o->procs);
	else
		emit_procs(&e, ch, o->procs);
	kv_emit_end(&e);
}

int kvb_write_json(const struct kvb_opts *o, FILE *f, const struct agg *a,
		   const struct child *ch, bool ok)
{
	kvb_report(f, true, o, a, ch, ok);
	if (ferror(f) | fclose(f)) {
		fprintf(stderr, "kvbench: --json %s: write failed\n",
			o->json_path);
		return -1;
	}
	return 0;
}
