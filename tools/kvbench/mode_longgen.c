// SPDX-License-Identifier: MIT
/*
 * kvbench --policy POLICY: long generation past max_context under each
 * context overflow policy given (or all four), one run per policy on
 * the same kvd (longgen.c runs one), then one table that compares them:
 * the tokens each sequence reached and why it stopped, the blocks it
 * kept at most against what its policy allows, the namespace's peak
 * blocks in use (sampled) and its ratio to none's, and the block ops
 * per second while the window slides. What a policy promises is checked
 * (none and truncate stop at max_context, the others keep no more than
 * their window): a run that breaks it says "off" and fails the run.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../emit.h"
#include "kvbench.h"
#include "kvd.h"
#include "lat.h"
#include "longgen.h"
#include "modes.h"
#include "report_num.h"

/* One policy's figures, over its processes and sequences. */
struct lg_sum {
	uint64_t	len_min, len_max;	/* tokens a sequence reached */
	uint64_t	kept_max;		/* tokens kept at the end */
	unsigned	nr_e2big, nr_done;
	uint32_t	peak_kept;		/* blocks, of any sequence */
	uint64_t	appends, slide_ops;
	uint64_t	t_start, t_end, t_slide;
	const char	*off;			/* what it broke, or NULL */
	const char	*status;
};

static const char *const stop_name[] = {
	[KVB_LG_RUNNING] = "running", [KVB_LG_DONE] = "done",
	[KVB_LG_E2BIG] = "E2BIG", [KVB_LG_SHORT] = "short",
	[KVB_LG_FAILED] = "failed",
};

static uint64_t lg_salt(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) == sizeof(v))
		return v;
	return splitmix64(now_ns() ^ (uint64_t)getpid() << 32);
}

static void sum_times(const struct kvb_lg_proc *p, struct lg_sum *m)
{
	m->appends += p->appends;
	m->slide_ops += p->slide_ops;
	if (!p->t_start)
		return;
	if (!m->t_start || p->t_start < m->t_start)
		m->t_start = p->t_start;
	if (p->t_end > m->t_end)
		m->t_end = p->t_end;
	if (p->t_slide && (!m->t_slide || p->t_slide < m->t_slide))
		m->t_slide = p->t_slide;
}

static void sum_seq(const struct kvb_lg_seq *r, struct lg_sum *m, bool first)
{
	if (first || r->end.len < m->len_min)
		m->len_min = r->end.len;
	if (r->end.len > m->len_max)
		m->len_max = r->end.len;
	if (r->end.kept > m->kept_max)
		m->kept_max = r->end.kept;
	if (r->peak_blocks > m->peak_kept)
		m->peak_kept = r->peak_blocks;
	m->nr_e2big += r->stop == KVB_LG_E2BIG;
	m->nr_done += r->stop == KVB_LG_DONE;
}

/* Tokens a sequence may keep under @p (0: all of them). */
static uint64_t keep_tokens(const struct kv_ctx_policy *p, uint32_t mc)
{
	switch (p->kind) {
	case KV_CTX_NONE:
		return 0;
	case KV_CTX_TRUNCATE:
		return mc;
	default:
		return (uint64_t)p->sinks + p->window +
		       !!(p->flags & KV_CTX_BOS_EXTRA);
	}
}

/* What the policy promises, against what its sequences did. */
static const char *lg_check(const struct kvb_opts *o,
			    const struct kvb_lg_run *run,
			    const struct lg_sum *m)
{
	const struct kv_ctx_policy *p = &run->policy;
	uint64_t total = (uint64_t)o->prompt_tokens + o->gen_tokens;
	uint64_t nseq = (uint64_t)o->procs * o->seqs, keep;
	bool stops = p->kind == KV_CTX_NONE ||
		     (p->kind == KV_CTX_TRUNCATE &&
		      !(p->flags & KV_CTX_DROP_OLDEST));
	uint32_t mc = run->max_context;

	if (stops && mc && total > mc) {
		if (m->len_min != mc || m->len_max != mc)
			return "a sequence did not stop at max_context";
		if (m->nr_e2big != nseq)
			return "an append past max_context was not refused -E2BIG";
		return NULL;
	}
	if (m->len_min != total || m->len_max != total || m->nr_done != nseq)
		return "a sequence did not take every token";
	keep = keep_tokens(p, mc);
	if (keep && m->kept_max > keep)
		return "a sequence kept more tokens than its policy";
	if (m->peak_kept > run->kept_bound)
		return "a sequence kept more blocks than its policy needs";
	return NULL;
}

static void lg_summarize(const struct kvb_opts *o,
			 const struct kvb_lg_run *run, struct lg_sum *m)
{
	size_t nseq = (size_t)o->procs * o->seqs;

	memset(m, 0, sizeof(*m));
	for (unsigned i = 0; run->map_bytes && i < o->procs; i++)
		sum_times(&run->proc[i], m);
	for (size_t k = 0; run->map_bytes && k < nseq; k++)
		sum_seq(&run->seq[k], m, !k);
	m->status = "ok";
	if (!run->ran || run->failed) {
		m->status = "FAIL";
		return;
	}
	m->off = lg_check(o, run, m);
	if (m->off)
		m->status = "off";
}

/* ---- the report ---- */

static const struct kv_emit_col pol_cols[] = {
	{ "policy",		"policy",	-22 },
	{ "max_context",	"max ctx",	8 },
	{ "tokens_min",		"min tokens",	11 },
	{ "tokens_max",		"max",		7 },
	{ "e2big",		"E2BIG",	6 },
	{ "peak_kept_blocks",	"kept/seq",	9 },
	{ "kept_bound",		"bound",	6 },
	{ "pool_peak_blocks",	"pool peak",	10 },
	{ "pool_vs_none",	"vs none",	8 },
	{ "pool_peak_cached",	"cached",	7 },
	{ "block_ops_per_s",	"blk ops/s",	11 },
	{ "tokens_per_s",	"tok/s",	10 },
	{ "status",		"status",	7 },
};

static const struct kv_emit_col seq_cols[] = {
	{ "policy",		"policy",	-22 },
	{ "proc",		"proc",		4 },
	{ "seq",		"seq",		4 },
	{ "len",		"len",		8 },
	{ "kept",		"kept",		7 },
	{ "dropped",		"dropped",	8 },
	{ "commit_end",		"commit_end",	11 },
	{ "first_drop_len",	"drop at",	8 },
	{ "commit_end_at_drop",	"commit then",	12 },
	{ "blocks",		"blocks",	7 },
	{ "peak_blocks",	"peak",		5 },
	{ "context_len",	"ctx_len",	8 },
	{ "sink_len",		"sink_len",	9 },
	{ "window_start",	"win_start",	10 },
	{ "stop",		"stop",		6 },
};

#define NR_COLS(c)	((int)(sizeof(c) / sizeof((c)[0])))

/* The first run of none, whose pool peak the others are compared with. */
static const struct kvb_lg_run *lg_none(const struct kvb_lg_run *runs,
					unsigned nr)
{
	for (unsigned i = 0; i < nr; i++)
		if (runs[i].policy.kind == KV_CTX_NONE && runs[i].ran)
			return &runs[i];
	return NULL;
}

static void emit_config(struct kv_emit *e, const struct kvb_opts *o,
			const struct kvb_lg_run *runs, unsigned nr)
{
	struct kv_geometry g = o->geom;

	kv_emit_obj_begin(e, "config", "config");
	kv_emit_u64(e, "procs", "engine processes", o->procs);
	kv_emit_u64(e, "seqs", "sequences per process", o->seqs);
	kv_emit_u64(e, "prompt_tokens", "prompt tokens", o->prompt_tokens);
	kv_emit_u64(e, "gen_tokens", "tokens to generate", o->gen_tokens);
	kv_emit_u64(e, "max_context", "max_context asked", o->max_context);
	kv_emit_u64(e, "ns_max_context", "namespace max_context",
		    nr ? runs[0].max_context : 0);
	kv_emit_str(e, "model", "model", o->model);
	kv_emit_u64(e, "layers", "layers", g.layers);
	kv_emit_u64(e, "kv_heads", "kv heads", g.kv_heads);
	kv_emit_u64(e, "head_dim", "head dim", g.head_dim);
	kv_emit_u64(e, "block_tokens", "block tokens", g.block_tokens);
	kv_emit_str(e, "dtype", "dtype", o->dtype_name);
	kvb_emit_bytes(e, "block_bytes", "block size",
		       kv_geometry_block_bytes(&g));
	kv_emit_u64(e, "sample_ms", "pool sampled every (ms)", o->sample_ms);
	kv_emit_obj_end(e);
}

static void emit_policy_row(struct kv_emit *e, const struct kvb_lg_run *run,
			    const struct lg_sum *m,
			    const struct kvb_lg_run *none)
{
	uint64_t wall = m->t_end - m->t_start;
	uint64_t slide = m->t_slide ? m->t_end - m->t_slide : 0;

	kv_emit_row_begin(e);
	kv_emit_cell_str(e, run->name);
	kv_emit_cell_u64(e, run->max_context);
	kv_emit_cell_u64(e, m->len_min);
	kv_emit_cell_u64(e, m->len_max);
	kv_emit_cell_u64(e, m->nr_e2big);
	kv_emit_cell_u64(e, m->peak_kept);
	kv_emit_cell_u64(e, run->kept_bound);
	kv_emit_cell_u64(e, run->pool_peak_used);
	kv_emit_cell_f64(e, none ? ratio(run->pool_peak_used,
					 none->pool_peak_used) : 0);
	kv_emit_cell_u64(e, run->pool_peak_cached);
	kv_emit_cell_f64(e, per_s(m->slide_ops, slide));
	kv_emit_cell_f64(e, per_s(m->appends, wall));
	kv_emit_cell_str(e, m->status);
	kv_emit_row_end(e);
}

static void emit_seq_rows(struct kv_emit *e, const struct kvb_opts *o,
			  const struct kvb_lg_run *run)
{
	for (size_t k = 0; run->map_bytes &&
	     k < (size_t)o->procs * o->seqs; k++) {
		const struct kvb_lg_seq *r = &run->seq[k];
		const struct kv_seq_range *g = &r->end;

		kv_emit_row_begin(e);
		kv_emit_cell_str(e, run->name);
		kv_emit_cell_u64(e, k / o->seqs);
		kv_emit_cell_u64(e, k % o->seqs);
		kv_emit_cell_u64(e, g->len);
		kv_emit_cell_u64(e, g->kept);
		kv_emit_cell_u64(e, g->dropped);
		kv_emit_cell_u64(e, g->commit_end);
		kv_emit_cell_u64(e, r->first_drop_len);
		kv_emit_cell_u64(e, r->first_drop_commit);
		kv_emit_cell_u64(e, g->nr_blocks);
		kv_emit_cell_u64(e, r->peak_blocks);
		kv_emit_cell_u64(e, g->context_len);
		kv_emit_cell_u64(e, g->sink_len);
		kv_emit_cell_u64(e, g->window_start);
		kv_emit_cell_str(e, r->stop < sizeof(stop_name) /
				 sizeof(stop_name[0]) ? stop_name[r->stop] :
				 "?");
		kv_emit_row_end(e);
	}
}

static const char lg_notes[] =
	"kept/seq: most blocks one sequence held (kv_seq_range nr_blocks), bound: what its policy needs\n"
	"pool peak: the namespace's blocks with ref > 0 (kv_stats, sampled); vs none: over none's pool peak\n"
	"cached: committed blocks with ref 0 (evictable) at most; blk ops/s: blocks allocated + released per second\n"
	"  while the window slides (from the first dropped token on, all processes); tok/s: tokens appended per second\n";

static void lg_report(FILE *f, bool json, const struct kvb_opts *o,
		      const struct kvb_lg_run *runs, const struct lg_sum *m,
		      unsigned nr, bool ok)
{
	const struct kvb_lg_run *none = lg_none(runs, nr);
	struct kv_emit e;

	kv_emit_begin(&e, f, json);
	kv_emit_obj_begin(&e, "kvbench", "kvbench");
	kv_emit_str(&e, "command", "command", o->cmdline);
	kv_emit_str(&e, "socket", "socket", o->socket ? o->socket :
		    "(libkvclient default)");
	kv_emit_str(&e, "mode", "mode", "long generation (--policy)");
	kv_emit_str(&e, "result", "result", ok ? "ok" : "FAILED");
	emit_config(&e, o, runs, nr);
	kv_emit_obj_end(&e);
	kv_emit_table_begin(&e, "policies", pol_cols, NR_COLS(pol_cols));
	for (unsigned i = 0; i < nr; i++)
		emit_policy_row(&e, &runs[i], &m[i], none);
	kv_emit_table_end(&e);
	if (!json) {
		fputs(lg_notes, f);
		if (!none)
			fputs("(no none run: vs none is 0)\n", f);
		for (unsigned i = 0; i < nr; i++)
			if (m[i].off)
				fprintf(f, "%s: off: %s\n", runs[i].name,
					m[i].off);
	}
	if (json || o->verbose) {
		if (!json)
			fputs("per sequence (kv_seq_range at the end; commit_end: tokens [0, commit_end) may be committed,\n"
			      "  len until the first drop, then no further: drop at / commit then: len and commit_end at it):\n",
			      f);
		kv_emit_table_begin(&e, "seqs", seq_cols, NR_COLS(seq_cols));
		for (unsigned i = 0; i < nr; i++)
			emit_seq_rows(&e, o, &runs[i]);
		kv_emit_table_end(&e);
	}
	kv_emit_end(&e);
}

static int lg_write_json(const struct kvb_opts *o,
			 const struct kvb_lg_run *runs,
			 const struct lg_sum *m, unsigned nr, bool ok)
{
	FILE *f = kvb_json_open(o->json_path);

	if (!f)
		return -1;
	lg_report(f, true, o, runs, m, nr, ok);
	return kvb_json_close(o->json_path, f);
}

int kvb_mode_longgen(struct kvb_opts *o)
{
	struct kvb_lg_run runs[KVB_MAX_POLICIES];
	struct lg_sum m[KVB_MAX_POLICIES];
	struct bench_kvd pk = { 0 };
	uint64_t salt = lg_salt();
	unsigned nr = 0;
	bool ok = true;
	int ret = 0;

	if (o->private_pool) {
		if (bench_kvd_start(&pk, o->kvd_bin, o->private_pool, NULL))
			return 1;
		o->socket = pk.sock;
	}
	/* A process that died must not take the parent with it. */
	signal(SIGPIPE, SIG_IGN);
	for (; nr < o->nr_policies; nr++) {
		ret = kvb_lg_run(o, nr, salt, &runs[nr]);
		if (ret) {
			kvb_lg_run_free(&runs[nr]);
			break;
		}
		lg_summarize(o, &runs[nr], &m[nr]);
		ok = ok && !strcmp(m[nr].status, "ok");
	}
	ok = ok && !ret;
	if (nr && !o->quiet)
		lg_report(stdout, false, o, runs, m, nr, ok);
	if (nr && o->json_path && lg_write_json(o, runs, m, nr, ok))
		ok = false;
	for (unsigned i = 0; i < nr; i++)
		kvb_lg_run_free(&runs[i]);
	if (o->private_pool)
		bench_kvd_stop(&pk);
	return ret ? ret : ok ? 0 : 1;
}
