// SPDX-License-Identifier: MIT
/*
 * kvd's admin replies as Prometheus text (metrics.h). Names follow
 * Prometheus' conventions: a kvd_ prefix, the unit in the name (_bytes,
 * _pages, _blocks, _tokens, _seconds), counters ending in _total. Each
 * family's samples are written together, as the format requires.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <kv/abi.h>

#include "admin.h"
#include "metrics.h"

/* A record field as a sample's value. */
struct metric {
	const char	*name;
	const char	*type;		/* "gauge", "counter" */
	const char	*help;
	size_t		off;
	size_t		size;		/* 4 or 8 */
};

#define M(s, f, n, t, h)	{ .name = n, .type = t, .help = h, \
				  .off = offsetof(s, f), \
				  .size = sizeof(((s *)0)->f) }

typedef void (*labels_fn)(char *buf, size_t len, const void *rec);

static uint64_t field(const void *rec, const struct metric *m)
{
	uint32_t v32;
	uint64_t v64;

	if (m->size == 4) {
		memcpy(&v32, (const char *)rec + m->off, 4);
		return v32;
	}
	memcpy(&v64, (const char *)rec + m->off, 8);
	return v64;
}

static void family(FILE *f, const char *name, const char *type,
		   const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* @in as a label value: backslash, quote and newline escaped. */
static void label_value(char *out, size_t len, const char *in, size_t max)
{
	size_t o = 0;

	for (size_t i = 0; i < max && in[i] && o + 3 < len; i++) {
		if (in[i] == '\\' || in[i] == '"' || in[i] == '\n')
			out[o++] = '\\';
		out[o++] = in[i] == '\n' ? 'n' : in[i];
	}
	out[o] = 0;
}

/* The records' fields, one family each, a sample per record. */
static void emit_fields(FILE *f, const struct metric *m, size_t nr_m,
			const void *recs, size_t rec, uint32_t n, labels_fn lf)
{
	char lb[256];

	for (size_t i = 0; i < nr_m; i++) {
		family(f, m[i].name, m[i].type, m[i].help);
		for (uint32_t j = 0; j < n; j++) {
			const void *r = (const char *)recs + j * rec;

			lf(lb, sizeof(lb), r);
			fprintf(f, "%s{%s} %llu\n", m[i].name, lb,
				(unsigned long long)field(r, &m[i]));
		}
	}
}


static void gauge(FILE *f, const char *name, const char *help, uint64_t v)
{
	family(f, name, "gauge", help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
	family(f, name, "counter", help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void emit_pool(FILE *f, const struct kv_admin_status *st)
{
	gauge(f, "kvd_pool_bytes", "Bytes of the shared pool.", st->pool_bytes);
	gauge(f, "kvd_pool_backed_bytes", "Pool bytes now backed by memory.",
	      st->backed_bytes);
	gauge(f, "kvd_page_bytes", "Bytes of one pool page.", st->page_bytes);
	family(f, "kvd_pool_pages", "gauge", "Pool pages by state.");
	fprintf(f, "kvd_pool_pages{state=\"used\"} %u\n", st->pages_used);
	fprintf(f, "kvd_pool_pages{state=\"free\"} %u\n", st->pages_free);
	gauge(f, "kvd_pool_peak_used_pages", "Most pool pages used at once.",
	      st->peak_pages_used);
	gauge(f, "kvd_clients", "Connected clients.", st->nr_clients);
	gauge(f, "kvd_namespaces", "Namespaces (models) in the pool.",
	      st->nr_namespaces);
	fprintf(f, "# HELP kvd_uptime_seconds Seconds since kvd started.\n"
		"# TYPE kvd_uptime_seconds gauge\nkvd_uptime_seconds %.3f\n",
		st->uptime_ms / 1000.0);
	counter(f, "kvd_ops_total", "SQEs served, all clients.", st->ops);
	counter(f, "kvd_reclaims_total",
		"Cached blocks evicted for another namespace.", st->reclaims);
}

static void ns_labels(char *buf, size_t len, const void *rec)
{
	const struct kv_admin_ns *ns = rec;
	char model[2 * KV_MODEL_ID_MAX + 1];

	label_value(model, sizeof(model), ns->model_id, KV_MODEL_ID_MAX);
	snprintf(buf, len, "ns=\"%u\",model=\"%s\"", ns->id, model);
}

static const struct metric ns_metrics[] = {
	M(struct kv_admin_ns, pages, "kvd_namespace_pages", "gauge",
	  "Pool pages charged to the namespace."),
	M(struct kv_admin_ns, min_pages, "kvd_namespace_min_pages", "gauge",
	  "The namespace's guaranteed pages (0: none)."),
	M(struct kv_admin_ns, max_pages, "kvd_namespace_max_pages", "gauge",
	  "The namespace's page limit (0: unlimited)."),
	M(struct kv_admin_ns, max_blocks, "kvd_namespace_max_blocks", "gauge",
	  "The most blocks the namespace may have."),
	M(struct kv_admin_ns, nr_clients, "kvd_namespace_clients", "gauge",
	  "Clients connected to the namespace."),
	M(struct kv_admin_ns, block_bytes, "kvd_namespace_block_bytes", "gauge",
	  "Bytes of one block of the namespace."),
};

/* Blocks by state: used (ref > 0), cached, free (ref 0), pinned. */
static void emit_ns_blocks(FILE *f, const struct kv_admin_ns *ns, uint32_t n)
{
	static const char *const states[] = { "used", "cached", "free",
					       "pinned" };
	char lb[256];

	family(f, "kvd_namespace_blocks", "gauge",
	       "Blocks in the namespace's slabs by state (cached and pinned are of the free and used ones).");
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t v[] = { ns[i].blocks_used, ns[i].cached_blocks,
				       ns[i].blocks_free, ns[i].pinned_blocks };

		ns_labels(lb, sizeof(lb), &ns[i]);
		for (size_t s = 0; s < 4; s++)
			fprintf(f, "kvd_namespace_blocks{%s,state=\"%s\"} %u\n",
				lb, states[s], v[s]);
	}
}

static void prefix_labels(char *buf, size_t len, const void *rec)
{
	const struct kv_admin_prefix *p = rec;
	char model[2 * KV_MODEL_ID_MAX + 1];

	label_value(model, sizeof(model), p->model_id, KV_MODEL_ID_MAX);
	snprintf(buf, len, "ns=\"%u\",model=\"%s\"", p->ns_id, model);
}

static const struct metric prefix_metrics[] = {
	M(struct kv_admin_prefix, lookups, "kvd_prefix_lookups_total",
	  "counter", "Prefix lookups."),
	M(struct kv_admin_prefix, lookup_blocks,
	  "kvd_prefix_lookup_blocks_total", "counter",
	  "Full-block hashes looked up."),
	M(struct kv_admin_prefix, hit_blocks, "kvd_prefix_hit_blocks_total",
	  "counter", "Blocks found by lookups."),
	M(struct kv_admin_prefix, lookup_tokens,
	  "kvd_prefix_lookup_tokens_total", "counter",
	  "Tokens looked up (lookup blocks times block tokens)."),
	M(struct kv_admin_prefix, hit_tokens, "kvd_prefix_hit_tokens_total",
	  "counter", "Tokens found (hit blocks times block tokens)."),
	M(struct kv_admin_prefix, evictions, "kvd_evictions_total", "counter",
	  "Cached blocks evicted."),
	M(struct kv_admin_prefix, committed_blocks,
	  "kvd_prefix_committed_blocks", "gauge",
	  "Committed blocks in the prefix index."),
};

/* Tokens looked up and not found: lookup - hit. */
static void emit_misses(FILE *f, const struct kv_admin_prefix *p, uint32_t n)
{
	char lb[256];

	family(f, "kvd_prefix_miss_tokens_total", "counter",
	       "Tokens looked up and not found.");
	for (uint32_t i = 0; i < n; i++) {
		uint64_t miss = p[i].lookup_tokens > p[i].hit_tokens ?
				p[i].lookup_tokens - p[i].hit_tokens : 0;

		prefix_labels(lb, sizeof(lb), &p[i]);
		fprintf(f, "kvd_prefix_miss_tokens_total{%s} %llu\n", lb,
			(unsigned long long)miss);
	}
}

static void tenant_labels(char *buf, size_t len, const void *rec)
{
	const struct kv_admin_tenant *t = rec;
	char name[2 * sizeof(t->name) + 1];

	label_value(name, sizeof(name), t->name, sizeof(t->name));
	snprintf(buf, len, "tenant=\"%s\"", name);
}

static const struct metric tenant_metrics[] = {
	M(struct kv_admin_tenant, pages, "kvd_tenant_pages", "gauge",
	  "Pool pages charged to the tenant."),
	M(struct kv_admin_tenant, nr_clients, "kvd_tenant_clients", "gauge",
	  "Clients of the tenant."),
};

static void emit_quota(FILE *f, const struct kv_admin_tenant *t, uint32_t n)
{
	char lb[256];

	family(f, "kvd_tenant_quota_pages", "gauge",
	       "The tenant's quota: min guaranteed, max allowed (0: none).");
	for (uint32_t i = 0; i < n; i++) {
		tenant_labels(lb, sizeof(lb), &t[i]);
		fprintf(f, "kvd_tenant_quota_pages{%s,kind=\"min\"} %u\n", lb,
			t[i].min_pages);
		fprintf(f, "kvd_tenant_quota_pages{%s,kind=\"max\"} %u\n", lb,
			t[i].max_pages);
	}
}

static void tier_labels(char *buf, size_t len, const void *rec)
{
	const struct kv_admin_tier *t = rec;
	char name[2 * sizeof(t->name) + 1];

	label_value(name, sizeof(name), t->name, sizeof(t->name));
	snprintf(buf, len, "tier=\"%s\"", name);
}

static const struct metric tier_metrics[] = {
	M(struct kv_admin_tier, cap_bytes, "kvd_tier_capacity_bytes", "gauge",
	  "The tier's capacity."),
	M(struct kv_admin_tier, used_bytes, "kvd_tier_used_bytes", "gauge",
	  "Bytes the tier holds."),
	M(struct kv_admin_tier, blocks, "kvd_tier_blocks", "gauge",
	  "Blocks the tier holds."),
	M(struct kv_admin_tier, demotions, "kvd_tier_demotions_total",
	  "counter", "Blocks taken in from the pool."),
	M(struct kv_admin_tier, promotions, "kvd_tier_promotions_total",
	  "counter", "Blocks brought back into the pool."),
	M(struct kv_admin_tier, lookups, "kvd_tier_lookups_total", "counter",
	  "Lookups that asked the tier."),
	M(struct kv_admin_tier, drops, "kvd_tier_drops_total", "counter",
	  "Blocks dropped for room."),
	M(struct kv_admin_tier, corrupt, "kvd_tier_corrupt_total", "counter",
	  "Blocks dropped on a checksum mismatch."),
	M(struct kv_admin_tier, errors, "kvd_tier_errors_total", "counter",
	  "I/O errors of a disk tier."),
};

/* A disk tier's I/O percentiles, seconds (within 25%; 0: none yet). */
static void emit_tier_lat(FILE *f, const struct kv_admin_tier *t, uint32_t n)
{
	char lb[64];

	family(f, "kvd_tier_io_latency_seconds", "gauge",
	       "A disk tier's I/O time, issue to completion, at a quantile.");
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t us[] = { t[i].read_p50_us, t[i].read_p99_us,
					t[i].write_p50_us, t[i].write_p99_us };

		tier_labels(lb, sizeof(lb), &t[i]);
		for (size_t k = 0; k < 4; k++)
			fprintf(f, "kvd_tier_io_latency_seconds{%s,io=\"%s\",quantile=\"%s\"} %.6f\n",
				lb, k < 2 ? "read" : "write",
				k % 2 ? "0.99" : "0.5", us[k] / 1e6);
	}
}

static void op_counts(FILE *f, const struct kv_admin_op *o, uint32_t n)
{
	family(f, "kvd_requests_total", "counter",
	       "SQEs taken off the rings, by opcode.");
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "kvd_requests_total{op=\"%.16s\"} %llu\n", o[i].name,
			(unsigned long long)o[i].requests);
	family(f, "kvd_request_errors_total", "counter",
	       "SQEs that completed at once with an error, by opcode.");
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "kvd_request_errors_total{op=\"%.16s\"} %llu\n",
			o[i].name, (unsigned long long)o[i].errors);
}

/* One opcode's sampled service times: cumulative buckets, +Inf, sum. */
static void op_histogram(FILE *f, const struct kv_admin_op *o)
{
	static const uint64_t le[KV_ADMIN_OP_BUCKETS] = KV_ADMIN_OP_LE_NS;
	const char *h = "kvd_request_duration_seconds";
	uint64_t seen = 0;

	for (uint32_t b = 0; b < KV_ADMIN_OP_BUCKETS; b++) {
		seen += o->bucket[b];
		fprintf(f, "%s_bucket{op=\"%.16s\",le=\"%g\"} %llu\n", h,
			o->name, le[b] / 1e9, (unsigned long long)seen);
	}
	fprintf(f, "%s_bucket{op=\"%.16s\",le=\"+Inf\"} %llu\n", h, o->name,
		(unsigned long long)o->timed);
	fprintf(f, "%s_sum{op=\"%.16s\"} %.9f\n", h, o->name, o->timed_ns / 1e9);
	fprintf(f, "%s_count{op=\"%.16s\"} %llu\n", h, o->name,
		(unsigned long long)o->timed);
}

static void emit_ops(FILE *f, const struct kv_admin_op *o, uint32_t n)
{
	op_counts(f, o, n);
	family(f, "kvd_request_duration_seconds", "histogram",
	       "SQE service time, taken to issued, of 1 SQE in 64 per opcode.");
	for (uint32_t i = 0; i < n; i++)
		op_histogram(f, &o[i]);
}

#define FIELDS(f, m, r, n, lf) \
	emit_fields(f, m, sizeof(m) / sizeof(m[0]), r, sizeof(*(r)), n, lf)

/* The calls after STATUS: each family's absence is its call's failure. */
static void emit_rest(FILE *f, const char *path, struct kv_admin_status *st)
{
	void *rec = st + 1;
	int n;

	n = kv_admin_get(path, KV_ADMIN_PREFIX, sizeof(struct kv_admin_prefix), st);
	if (n >= 0) {
		FIELDS(f, prefix_metrics, (struct kv_admin_prefix *)rec, n,
		       prefix_labels);
		emit_misses(f, rec, n);
	}
	n = kv_admin_get(path, KV_ADMIN_TENANTS, sizeof(struct kv_admin_tenant), st);
	if (n >= 0) {
		FIELDS(f, tenant_metrics, (struct kv_admin_tenant *)rec, n,
		       tenant_labels);
		emit_quota(f, rec, n);
	}
	n = kv_admin_get(path, KV_ADMIN_TIERS, sizeof(struct kv_admin_tier), st);
	if (n >= 0) {
		FIELDS(f, tier_metrics, (struct kv_admin_tier *)rec, n,
		       tier_labels);
		emit_tier_lat(f, rec, n);
	}
	n = kv_admin_get(path, KV_ADMIN_OPS, sizeof(struct kv_admin_op), st);
	if (n >= 0)
		emit_ops(f, rec, n);
}

int kv_metrics_write(FILE *f, const char *path)
{
	struct kv_admin_status *st = calloc(1, KV_ADMIN_REPLY_MAX);
	int n;

	if (!st)
		return -ENOMEM;
	n = kv_admin_get(path, KV_ADMIN_STATUS, sizeof(struct kv_admin_ns), st);
	if (n < 0)
		goto out;
	emit_pool(f, st);
	FIELDS(f, ns_metrics, (struct kv_admin_ns *)(st + 1), (uint32_t)n,
	       ns_labels);
	emit_ns_blocks(f, (void *)(st + 1), (uint32_t)n);
	emit_rest(f, path, st);
	n = 0;
out:
	free(st);
	return n;
}
