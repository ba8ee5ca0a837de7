// SPDX-License-Identifier: MIT
/*
 * kvbench --bench-summary DIR: the one table `make bench` ends with,
 * from the JSON reports the benchmarks wrote into DIR:
 * bench-floor.json (--floor), bench-hash.json (--hash-bench),
 * bench-workload.json (--workload), bench-redis.json (--redis) and
 * bench-batch.json and bench-seq.json (batched ALLOC+RELEASE: 256 SQEs
 * of one block per doorbell, and one SQE per 512-block sequence). Each row gives
 * a figure, its ratio to what it is judged against, and the goal of
 * project's performance issue. A goal missed is reported, never failed: benchmarks
 * on a shared machine are not tests.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <json-c/json.h>

#include "../emit.h"
#include "lat.h"
#include "modes.h"

/* The goals of the project's performance issue (README, Benchmarks). */
#define GOAL_NOP_VS_SPIN	2.0
#define GOAL_AR_VS_SPIN		3.0
#define GOAL_WAKE_VS_EVENTFD	1.2
#define GOAL_LOOKUP_VS_REDIS	50.0
#define GOAL_BATCH_BLOCKS_S	10e6

struct sum_files {
	struct json_object *floor, *hash, *workload, *redis, *batch, *seq;
};

static const struct kv_emit_col sum_cols[] = {
	{ "metric", "metric", -44 }, { "value", "value", -16 },
	{ "ratio", "ratio", -34 }, { "goal", "goal", -20 },
	{ "status", "", -7 },
};

/* One row; @met < 0: no goal to meet. NAN values say why instead. */
static void sum_row_emit(struct kv_emit *e, const char *metric,
			 const char *value, const char *ratio,
			 const char *goal, int met)
{
	kv_emit_row_begin(e);
	kv_emit_cell_str(e, metric);
	kv_emit_cell_str(e, value);
	kv_emit_cell_str(e, ratio);
	kv_emit_cell_str(e, goal);
	kv_emit_cell_str(e, met < 0 ? "" : met ? "met" : "MISSED");
	kv_emit_row_end(e);
}

static void fmt_ns(char *buf, size_t len, double ns)
{
	if (isnan(ns))
		snprintf(buf, len, "not run");
	else if (ns >= 1e6)
		snprintf(buf, len, "%.2f ms", ns / 1e6);
	else if (ns >= 1e3)
		snprintf(buf, len, "%.2f us", ns / 1e3);
	else
		snprintf(buf, len, "%.0f ns", ns);
}

static void fmt_rate(char *buf, size_t len, double v, const char *unit)
{
	if (isnan(v))
		snprintf(buf, len, "not run");
	else if (v >= 1e6)
		snprintf(buf, len, "%.2f M%s", v / 1e6, unit);
	else if (v >= 1e3)
		snprintf(buf, len, "%.1f k%s", v / 1e3, unit);
	else
		snprintf(buf, len, "%.1f %s", v, unit);
}

static void fmt_ratio(char *buf, size_t len, double r, const char *what)
{
	if (isnan(r))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2fx %s", r, what);
}

/* A p50 judged as a multiple of a floor's p50, at most @goal times. */
static void sum_vs_floor(struct kv_emit *e, struct json_object *fl,
			 const char *metric, const char *row,
			 const char *floor_row, const char *floor_name,
			 double goal)
{
	double v = kvb_json_row(fl, row, "p50_ns");
	double f = kvb_json_row(fl, floor_row, "p50_ns");
	char value[32], ratio[48], g[32];

	fmt_ns(value, sizeof(value), v);
	fmt_ratio(ratio, sizeof(ratio), v / f, floor_name);
	snprintf(g, sizeof(g), "<= %.1fx %s", goal, floor_name);
	sum_row_emit(e, metric, value, ratio, g,
		     isnan(v / f) ? -1 : v / f <= goal);
}

static void sum_workload(struct kv_emit *e, struct json_object *w)
{
	char value[32], ratio[48];
	double rps = kvb_json_num(w, "median.req_per_s");
	double hit = kvb_json_num(w, "median.hit_token_frac");
	double bops = kvb_json_num(w, "median.block_ops_per_s");

	fmt_rate(value, sizeof(value), rps, "req/s");
	snprintf(ratio, sizeof(ratio), isnan(hit) ? "-" : "hit tokens %.3f",
		 hit);
	sum_row_emit(e, "shared_prompts requests/s (median of runs)", value,
		     ratio, "report only", -1);
	fmt_rate(value, sizeof(value), bops, "/s");
	sum_row_emit(e, "shared_prompts block ops/s", value, "-",
		     "report only", -1);
}

static void sum_redis(struct kv_emit *e, struct json_object *r)
{
	struct json_object *red, *skip;
	char value[32], ratio[48], g[32];
	double look, ratio_v;

	snprintf(g, sizeof(g), ">= %.0fx faster", GOAL_LOOKUP_VS_REDIS);
	if (r && json_object_object_get_ex(r, "redis", &red) &&
	    json_object_object_get_ex(red, "skipped", &skip)) {
		/* The reason is in the JSON; the table only says so. */
		sum_row_emit(e, "32-block LOOKUP p50 vs redis MGET",
			     "skipped", "no redis-server", g, -1);
		return;
	}
	red = r && json_object_object_get_ex(r, "redis", &red) ? red : NULL;
	look = kvb_json_row(red, "lookup", "p50_ns");
	ratio_v = kvb_json_num(red, "ratio");
	fmt_ns(value, sizeof(value), look);
	fmt_ratio(ratio, sizeof(ratio), ratio_v, "redis/kvd");
	sum_row_emit(e, "32-block LOOKUP p50 vs redis MGET", value, ratio, g,
		     isnan(ratio_v) ? -1 : ratio_v >= GOAL_LOOKUP_VS_REDIS);
}

/*
 * Blocks/s of a batched run: while kvd serves (submit to last CQE, what
 * one daemon core does; the goal's figure) where the report has it, and
 * end to end (client work between batches included).
 */
static void sum_batch(struct kv_emit *e, struct json_object *b,
		      const char *metric)
{
	double all = kvb_json_num(b, "kvbench.results.blocks_per_s");
	double serve = kvb_json_num(b, "kvbench.results.serve_blocks_per_s");
	double v = isnan(serve) ? all : serve;
	char value[32], ratio[64], g[32], rate[32];

	fmt_rate(value, sizeof(value), v, "blk/s");
	fmt_rate(rate, sizeof(rate), all, "");
	if (isnan(v))
		snprintf(ratio, sizeof(ratio), "-");
	else
		snprintf(ratio, sizeof(ratio), "%.2fx goal; %s end to end",
			 v / GOAL_BATCH_BLOCKS_S, rate);
	snprintf(g, sizeof(g), ">= %.0f M blk/s", GOAL_BATCH_BLOCKS_S / 1e6);
	sum_row_emit(e, metric, value, ratio, g,
		     isnan(v) ? -1 : v >= GOAL_BATCH_BLOCKS_S);
}

/* System calls per op on each side of the ring (report only). */
static void sum_syscalls(struct kv_emit *e, struct json_object *b,
			 const char *metric)
{
	double cl = kvb_json_num(b, "kvbench.results.syscalls_per_op");
	double kvd = kvb_json_num(b, "kvbench.results.kvd_syscalls_per_op");
	double pf = kvb_json_num(b, "kvbench.results.kvd_page_faults_per_op");
	char value[48], ratio[48];

	if (isnan(cl))
		snprintf(value, sizeof(value), "not run");
	else if (isnan(kvd))
		snprintf(value, sizeof(value), "%.4f / -", cl);
	else
		snprintf(value, sizeof(value), "%.4f / %.4f", cl, kvd);
	if (isnan(pf))
		snprintf(ratio, sizeof(ratio), "-");
	else
		snprintf(ratio, sizeof(ratio), "kvd faults/op %.5f", pf);
	sum_row_emit(e, metric, value, ratio, "report only", -1);
}

/* kv_hash_blocks' GB/s (row @kv) against the bare hash's (row @bare). */
static void sum_hash_row(struct kv_emit *e, struct json_object *hash,
			 const char *kv_row, const char *bare_row,
			 const char *bare_name, const char *metric)
{
	double kv = kvb_json_row(hash, kv_row, "gb_per_s");
	double bare = kvb_json_row(hash, bare_row, "gb_per_s");
	char value[32], ratio[48];

	if (isnan(kv))
		snprintf(value, sizeof(value), "not run");
	else
		snprintf(value, sizeof(value), "%.2f GB/s", kv);
	fmt_ratio(ratio, sizeof(ratio), kv / bare, bare_name);
	sum_row_emit(e, metric, value, ratio, "-", -1);
}

static void sum_hash(struct kv_emit *e, struct json_object *h)
{
	struct json_object *hash = NULL;

	if (h)
		json_object_object_get_ex(h, "hash", &hash);
	sum_hash_row(e, hash, "kv_xxh3", "xxh3_whole", "XXH3_128bits",
		     "kv_hash_blocks XXH3-128 (token bytes)");
	sum_hash_row(e, hash, "kv_sha256", "sha256_whole", "SHA-256",
		     "kv_hash_blocks SHA-256 (token bytes)");
}

int kvb_mode_summary(struct kvb_opts *o)
{
	struct json_object *fl = NULL;
	struct sum_files f = {
		.floor = kvb_json_load(o->mode_arg, "bench-floor.json"),
		.hash = kvb_json_load(o->mode_arg, "bench-hash.json"),
		.workload = kvb_json_load(o->mode_arg, "bench-workload.json"),
		.redis = kvb_json_load(o->mode_arg, "bench-redis.json"),
		.batch = kvb_json_load(o->mode_arg, "bench-batch.json"),
		.seq = kvb_json_load(o->mode_arg, "bench-seq.json"),
	};
	struct kv_emit e;

	if (!f.floor && !f.hash && !f.workload && !f.redis && !f.batch &&
	    !f.seq) {
		fprintf(stderr, "kvbench: --bench-summary %s: no bench-*.json report there (make bench writes them)\n",
			o->mode_arg);
		return 1;
	}
	if (f.floor)
		json_object_object_get_ex(f.floor, "floor", &fl);
	kv_emit_begin(&e, stdout, false);
	kv_emit_obj_begin(&e, "summary", "kvd benchmarks against the project's performance goals (not tests)");
	kv_emit_table_begin(&e, "rows", sum_cols, 5);
	sum_vs_floor(&e, fl, "NOP round trip p50", "nop", "spin", "spin",
		     GOAL_NOP_VS_SPIN);
	sum_vs_floor(&e, fl, "ALLOC+RELEASE 1 block p50 (2 trips)",
		     "alloc_release", "spin", "spin", GOAL_AR_VS_SPIN);
	sum_vs_floor(&e, fl, "ALLOC+RELEASE 1 block p50 (1 trip)",
		     "alloc_release_1rt", "spin", "spin", GOAL_AR_VS_SPIN);
	/* Against the eventfd floor after the same 50 ms of idle: a
	 * halted vCPU's wake-up is the machine's, not kvd's. */
	sum_vs_floor(&e, fl, "NOP to a kvd idle 50 ms p50", "nop_idle",
		     "eventfd_idle", "eventfd idle", GOAL_WAKE_VS_EVENTFD);
	sum_workload(&e, f.workload);
	sum_redis(&e, f.redis);
	sum_batch(&e, f.batch, "ALLOC+RELEASE, 256 one-block SQEs/batch");
	sum_batch(&e, f.seq, "ALLOC+RELEASE of whole 512-block sequences");
	sum_syscalls(&e, f.batch, "syscalls/op client / kvd (256 SQEs)");
	sum_syscalls(&e, f.seq, "syscalls/op client / kvd (sequences)");
	sum_hash(&e, f.hash);
	kv_emit_table_end(&e);
	kv_emit_obj_end(&e);
	kv_emit_end(&e);
	json_object_put(f.floor);
	json_object_put(f.hash);
	json_object_put(f.workload);
	json_object_put(f.redis);
	json_object_put(f.batch);
	json_object_put(f.seq);
	return 0;
}
