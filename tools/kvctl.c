// SPDX-License-Identifier: MIT
/*
 * kvctl: kvd's admin command. Sends one request on the admin socket and
 * renders the reply as a table or, with --json, as JSON (one emitter).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <kv/abi.h>
#include <kv/kv.h>	/* kv_ctx_policy_format (libkvclient/ctx.c, linked in) */

#include "admin.h"
#include "emit.h"
#include "metrics.h"
#include "kvevents.h"
#include "top.h"

#ifndef KV_VERSION
#define KV_VERSION "0.0"
#endif

#define ARRAY_LEN(a)	((int)(sizeof(a) / sizeof((a)[0])))
#define REPLY_MAX	KV_ADMIN_REPLY_MAX

static const char *dtype_name(uint32_t d)
{
	static const char *const names[] = {
		[KV_DTYPE_FP16] = "fp16", [KV_DTYPE_BF16] = "bf16",
		[KV_DTYPE_FP32] = "fp32", [KV_DTYPE_FP8_E4M3] = "fp8_e4m3",
		[KV_DTYPE_INT8] = "int8", [KV_DTYPE_OPAQUE] = "opaque",
	};

	return d < KV_DTYPE__MAX ? names[d] : "?";
}

/*
 * The admin socket: --admin-socket, else $KVD_ADMIN_SOCKET, else
 * kvd-admin.sock beside $KVD_SOCKET (where kvd puts it), else the default.
 */
static int admin_path(const char *opt, char *buf, size_t len)
{
	const char *e = getenv("KVD_ADMIN_SOCKET"), *s = getenv("KVD_SOCKET");
	const char *xdg, *slash;
	int n;

	if (opt)
		n = snprintf(buf, len, "%s", opt);
	else if (e && *e)
		n = snprintf(buf, len, "%s", e);
	else if (s && *s)
		n = snprintf(buf, len, "%.*skvd-admin.sock",
			     (slash = strrchr(s, '/')) ? (int)(slash - s + 1) : 0,
			     s);
	else if (geteuid() == 0 || !(xdg = getenv("XDG_RUNTIME_DIR")) || !*xdg)
		n = snprintf(buf, len, "/run/kvd/kvd-admin.sock");
	else
		n = snprintf(buf, len, "%s/kvd-admin.sock", xdg);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A model id as text: kvd checks it is printable; be safe anyway. */
static void printable(char out[KV_MODEL_ID_MAX], const char *in)
{
	memcpy(out, in, KV_MODEL_ID_MAX);
	out[KV_MODEL_ID_MAX - 1] = 0;
	for (char *p = out; *p; p++)
		if (*p < 0x21 || *p > 0x7e)
			*p = '?';
}

/* What a command's handler is given: the reply, and where to ask for more. */
struct kvctl_reply {
	const char	*path;
	const struct kv_admin_status *st;
	const void	*rec;		/* st->nr_records records */
};

/* kvd's release (a kvd too old to say: "unknown") and its ABI. */
static void emit_version(struct kv_emit *e, const struct kv_admin_status *st)
{
	char v[32] = "unknown", abi[16];

	if (st->version)
		snprintf(v, sizeof(v), "%u.%u.%u", st->version >> 16,
			 (st->version >> 8) & 0xff, st->version & 0xff);
	snprintf(abi, sizeof(abi), "%u.%u", st->abi_major, st->abi_minor);
	kv_emit_str(e, "version", "kvd version", v);
	kv_emit_str(e, "abi", "kvd ABI", abi);
}

static void emit_pool(struct kv_emit *e, const struct kv_admin_status *st)
{
	static const char *const exports[] = {
		[KV_EXPORT_MEMFD] = "memfd", [KV_EXPORT_VMM] = "vmm",
		[KV_EXPORT_LEGACY] = "legacy",
	};

	kv_emit_obj_begin(e, "pool", "pool");
	kv_emit_str(e, "backend", "backend",
		    st->backend == KV_BACKEND_CUDA ? "cuda" : "host");
	kv_emit_str(e, "export", "export",
		    st->export_kind < ARRAY_LEN(exports) &&
		    exports[st->export_kind] ? exports[st->export_kind] : "?");
	kv_emit_i64(e, "device", "device", st->device);
	kv_emit_u64(e, "bytes", "bytes", st->pool_bytes);
	kv_emit_u64(e, "backed_bytes", "bytes backed", st->backed_bytes);
	kv_emit_u64(e, "page_bytes", "page bytes", st->page_bytes);
	kv_emit_u64(e, "pages", "pages", st->nr_pages);
	kv_emit_u64(e, "pages_used", "pages used", st->pages_used);
	kv_emit_u64(e, "pages_free", "pages free", st->pages_free);
	kv_emit_u64(e, "peak_pages_used", "peak pages used",
		    st->peak_pages_used);
	kv_emit_obj_end(e);
	kv_emit_u64(e, "pid", "kvd pid", st->pid);
	emit_version(e, st);
	kv_emit_u64(e, "uptime_ms", "uptime ms", st->uptime_ms);
	kv_emit_u64(e, "nr_clients", "clients", st->nr_clients);
	kv_emit_u64(e, "nr_namespaces", "namespaces", st->nr_namespaces);
	kv_emit_u64(e, "ops", "ops served", st->ops);
	kv_emit_u64(e, "reclaims", "blocks reclaimed", st->reclaims);
}

static const struct kv_emit_col ns_cols[] = {
	{ "id", "NS", 3 }, { "tenant", "TENANT", 6 }, { "model", "MODEL", -20 },
	{ "rev", "REV", -8 }, { "tp", "TP", 5 },
	{ "layers", "LAYERS", 6 }, { "kv_heads", "KVH", 4 },
	{ "head_dim", "HDIM", 5 }, { "block_tokens", "TOK", 4 },
	{ "dtype", "DTYPE", 8 }, { "block_bytes", "BLOCK_B", 9 },
	{ "slab_pages", "SLAB_PG", 7 }, { "waste_pct", "WASTE%", 6 },
	{ "slabs", "SLABS", 6 },
	{ "blocks", "BLOCKS", 7 }, { "blocks_used", "USED", 7 },
	{ "cached_blocks", "CACHED", 7 }, { "pinned_blocks", "PINNED", 7 },
	{ "blocks_free", "FREE", 7 }, { "max_blocks", "MAX", 8 },
	{ "clients", "CLIENTS", 7 }, { "lookup_blocks", "LOOKUP_BLK", 10 },
	{ "hit_blocks", "HIT_BLK", 9 }, { "hit_ratio", "HIT_RATIO", 9 },
};

/* Hits over blocks looked up, 0 before any lookup. */
static double hit_ratio(uint64_t hits, uint64_t looked_up)
{
	return looked_up ? (double)hits / (double)looked_up : 0;
}

/*
 * The prefix counters of the namespaces (a second call, KV_ADMIN_PREFIX:
 * kv_admin_ns has no room for them); NULL when it fails, the status then
 * shown with zeros.
 */
static struct kv_admin_status *prefix_books(const char *path)
{
	struct kv_admin_status *p = calloc(1, REPLY_MAX);
	ssize_t n;

	if (!p)
		return NULL;
	n = kv_admin_call(path, KV_ADMIN_PREFIX, 0, 0, p);
	if (n >= (ssize_t)sizeof(*p) && p->magic == KV_MAGIC &&
	    p->type == KV_MSG_ADMIN_REPLY && !p->status &&
	    p->nr_records <= KV_ADMIN_MAX_RECORDS &&
	    sizeof(*p) + p->nr_records * sizeof(struct kv_admin_prefix) <=
	    (size_t)n)
		return p;
	free(p);
	return NULL;
}

/* Namespace @id's record in @p, or a zeroed one. */
static struct kv_admin_prefix prefix_of(const struct kv_admin_status *p,
					uint32_t id)
{
	struct kv_admin_prefix none = { 0 };
	const struct kv_admin_prefix *r;

	if (!p)
		return none;
	r = (const void *)(p + 1);
	for (uint32_t i = 0; i < p->nr_records; i++)
		if (r[i].ns_id == id)
			return r[i];
	return none;
}

static const struct kv_emit_col tier_cols[] = {
	{ "tier", "TIER", -6 }, { "cap_bytes", "CAP_B", 12 },
	{ "used_bytes", "USED_B", 12 }, { "blocks", "BLOCKS", 8 },
	{ "demotions", "DEMOTED", 9 }, { "promotions", "PROMOTED", 9 },
	{ "demotions_per_s", "DEM/S", 9 }, { "promotions_per_s", "PROM/S", 9 },
	{ "lookups", "LOOKUPS", 9 }, { "drops", "DROPPED", 9 },
	{ "corrupt", "CORRUPT", 8 }, { "errors", "ERRORS", 7 },
	{ "read_p50_us", "RD_P50us", 8 }, { "read_p99_us", "RD_P99us", 8 },
	{ "write_p50_us", "WR_P50us", 8 }, { "write_p99_us", "WR_P99us", 8 },
};

/* The tiers table of a KV_ADMIN_TIERS reply @t; rates over @uptime_ms. */
static void emit_tiers(struct kv_emit *e, const struct kv_admin_status *st,
		       const struct kv_admin_tier *t, uint64_t uptime_ms)
{
	double s = uptime_ms ? uptime_ms / 1e3 : 1;

	kv_emit_table_begin(e, "tiers", tier_cols, ARRAY_LEN(tier_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char name[sizeof(t[i].name) + 1] = "";

		memcpy(name, t[i].name, sizeof(t[i].name));
		kv_emit_row_begin(e);
		kv_emit_cell_str(e, name);
		kv_emit_cell_u64(e, t[i].cap_bytes);
		kv_emit_cell_u64(e, t[i].used_bytes);
		kv_emit_cell_u64(e, t[i].blocks);
		kv_emit_cell_u64(e, t[i].demotions);
		kv_emit_cell_u64(e, t[i].promotions);
		kv_emit_cell_f64(e, t[i].demotions / s);
		kv_emit_cell_f64(e, t[i].promotions / s);
		kv_emit_cell_u64(e, t[i].lookups);
		kv_emit_cell_u64(e, t[i].drops);
		kv_emit_cell_u64(e, t[i].corrupt);
		kv_emit_cell_u64(e, t[i].errors);
		kv_emit_cell_u64(e, t[i].read_p50_us);
		kv_emit_cell_u64(e, t[i].read_p99_us);
		kv_emit_cell_u64(e, t[i].write_p50_us);
		kv_emit_cell_u64(e, t[i].write_p99_us);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static int kvctl_cmd_tiers(struct kv_emit *e, const struct kvctl_reply *r)
{
	emit_tiers(e, r->st, r->rec, r->st->uptime_ms);
	return 0;
}

/* kvctl status: the tiers table too, when kvd has any. */
static void status_tiers(struct kv_emit *e, const char *path,
			 uint64_t uptime_ms)
{
	struct kv_admin_status *p = calloc(1, REPLY_MAX);
	ssize_t n;

	if (!p)
		return;
	n = kv_admin_call(path, KV_ADMIN_TIERS, 0, 0, p);
	if (n >= (ssize_t)sizeof(*p) && p->magic == KV_MAGIC &&
	    p->type == KV_MSG_ADMIN_REPLY && !p->status && p->nr_records &&
	    p->nr_records <= KV_ADMIN_MAX_RECORDS &&
	    sizeof(*p) + p->nr_records * sizeof(struct kv_admin_tier) <=
	    (size_t)n)
		emit_tiers(e, p, (const void *)(p + 1), uptime_ms);
	free(p);
}

static int kvctl_cmd_status(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_ns *ns = r->rec;
	struct kv_admin_status *books = prefix_books(r->path);

	emit_pool(e, st);
	kv_emit_table_begin(e, "namespaces", ns_cols, ARRAY_LEN(ns_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char model[KV_MODEL_ID_MAX];
		char raw[KV_MODEL_ID_MAX] = "", rev[KV_MODEL_ID_MAX], tp[24];
		struct kv_admin_prefix pr;

		printable(model, ns[i].model_id);
		memcpy(raw, ns[i].model_rev, sizeof(ns[i].model_rev));
		printable(rev, raw);
		snprintf(tp, sizeof(tp), "%u/%u", ns[i].geom.tp_rank,
			 ns[i].geom.tp_size ? ns[i].geom.tp_size : 1);
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, ns[i].id);
		kv_emit_cell_u64(e, ns[i].tenant);
		kv_emit_cell_str(e, model);
		kv_emit_cell_str(e, rev[0] ? rev : "-");
		kv_emit_cell_str(e, tp);
		kv_emit_cell_u64(e, ns[i].geom.layers);
		kv_emit_cell_u64(e, ns[i].geom.kv_heads);
		kv_emit_cell_u64(e, ns[i].geom.head_dim);
		kv_emit_cell_u64(e, ns[i].geom.block_tokens);
		kv_emit_cell_str(e, dtype_name(ns[i].geom.dtype));
		kv_emit_cell_u64(e, ns[i].block_bytes);
		kv_emit_cell_u64(e, ns[i].slab_pages);
		kv_emit_cell_f64(e, ns[i].waste_ppm / 1e4);
		kv_emit_cell_u64(e, ns[i].nr_slabs);
		kv_emit_cell_u64(e, ns[i].blocks);
		kv_emit_cell_u64(e, ns[i].blocks_used);
		kv_emit_cell_u64(e, ns[i].cached_blocks);
		kv_emit_cell_u64(e, ns[i].pinned_blocks);
		kv_emit_cell_u64(e, ns[i].blocks_free);
		kv_emit_cell_u64(e, ns[i].max_blocks);
		kv_emit_cell_u64(e, ns[i].nr_clients);
		pr = prefix_of(books, ns[i].id);
		kv_emit_cell_u64(e, pr.lookup_blocks);
		kv_emit_cell_u64(e, pr.hit_blocks);
		kv_emit_cell_f64(e, hit_ratio(pr.hit_blocks, pr.lookup_blocks));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	free(books);
	status_tiers(e, r->path, st->uptime_ms);
	return 0;
}

static const struct kv_emit_col prefix_cols[] = {
	{ "ns", "NS", 3 }, { "model", "MODEL", -20 }, { "lookups", "LOOKUPS", 9 },
	{ "lookup_blocks", "LOOKUP_BLK", 10 }, { "lookup_tokens", "LOOKUP_TOK", 10 },
	{ "hit_blocks", "HIT_BLK", 9 }, { "hit_tokens", "HIT_TOK", 10 },
	{ "hit_ratio", "HIT_RATIO", 9 },
	{ "evictions", "EVICTED", 9 }, { "cached_blocks", "CACHED", 8 },
	{ "committed_blocks", "COMMITTED", 9 }, { "blocks_used", "USED", 7 },
	{ "evicted_now", "DROPPED", 8 },
};

/* kvctl prefix, and evict: the books after the eviction. */
static int kvctl_cmd_prefix(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_prefix *p = r->rec;

	kv_emit_table_begin(e, "namespaces", prefix_cols,
			    ARRAY_LEN(prefix_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char model[KV_MODEL_ID_MAX];

		printable(model, p[i].model_id);
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, p[i].ns_id);
		kv_emit_cell_str(e, model);
		kv_emit_cell_u64(e, p[i].lookups);
		kv_emit_cell_u64(e, p[i].lookup_blocks);
		kv_emit_cell_u64(e, p[i].lookup_tokens);
		kv_emit_cell_u64(e, p[i].hit_blocks);
		kv_emit_cell_u64(e, p[i].hit_tokens);
		kv_emit_cell_f64(e, hit_ratio(p[i].hit_blocks,
					      p[i].lookup_blocks));
		kv_emit_cell_u64(e, p[i].evictions);
		kv_emit_cell_u64(e, p[i].cached_blocks);
		kv_emit_cell_u64(e, p[i].committed_blocks);
		kv_emit_cell_u64(e, p[i].blocks_used);
		kv_emit_cell_u64(e, p[i].evicted_now);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	return 0;
}

static const struct kv_emit_col tree_cols[] = {
	{ "node", "NODE", -30 }, { "id", "BLOCK", 9 }, { "depth", "DEPTH", 5 },
	{ "ref", "REF", 5 }, { "children", "CHILDREN", 8 },
	{ "subtree", "SUBTREE", 8 },
};

static int kvctl_cmd_prefix_tree(struct kv_emit *e,
				 const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_tree_node *t = r->rec;
	char indent[48];

	kv_emit_table_begin(e, "tree", tree_cols, ARRAY_LEN(tree_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		uint32_t d = t[i].depth < 12 ? t[i].depth : 12;

		memset(indent, ' ', 2 * d);
		snprintf(indent + 2 * d, sizeof(indent) - 2 * d, "%s",
			 t[i].ref ? "+ held" : "- cached");
		kv_emit_row_begin(e);
		kv_emit_cell_str(e, indent);
		kv_emit_cell_u64(e, t[i].id);
		kv_emit_cell_u64(e, t[i].depth);
		kv_emit_cell_u64(e, t[i].ref);
		kv_emit_cell_u64(e, t[i].children);
		kv_emit_cell_u64(e, t[i].subtree);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	return 0;
}

static const struct kv_emit_col check_cols[] = {
	{ "ns", "NS", 5 }, { "ok", "OK", 3 }, { "why", "PROBLEM", -40 },
};

/* Exit 1 if a namespace is broken. */
static int kvctl_cmd_check(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_check *c = r->rec;
	int bad = 0;

	kv_emit_table_begin(e, "namespaces", check_cols, ARRAY_LEN(check_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char why[sizeof(c[i].why)];

		memcpy(why, c[i].why, sizeof(why));
		why[sizeof(why) - 1] = 0;
		bad += c[i].status != 0;
		kv_emit_row_begin(e);
		if (c[i].ns_id == KV_ADMIN_CHECK_TIERS)
			kv_emit_cell_str(e, "tiers");
		else
			kv_emit_cell_u64(e, c[i].ns_id);
		kv_emit_cell_bool(e, !c[i].status);
		kv_emit_cell_str(e, c[i].status ? why : "-");
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	return bad ? 1 : 0;
}

static const struct kv_emit_col tenant_cols[] = {
	{ "id", "ID", 3 }, { "name", "TENANT", -16 }, { "configured", "CONF", 4 },
	{ "admits", "ADMITS", 6 }, { "clients", "CLIENTS", 7 },
	{ "pages", "PAGES", 7 }, { "min_pages", "MIN", 7 }, { "max_pages", "MAX", 7 },
};

static int kvctl_cmd_tenants(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_tenant *t = r->rec;

	kv_emit_table_begin(e, "tenants", tenant_cols, ARRAY_LEN(tenant_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char name[KV_MODEL_ID_MAX] = "";

		memcpy(name, t[i].name, sizeof(t[i].name));
		name[sizeof(t[i].name) - 1] = 0;
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, t[i].id);
		kv_emit_cell_str(e, name);
		kv_emit_cell_bool(e, t[i].configured);
		kv_emit_cell_bool(e, t[i].in_conf);
		kv_emit_cell_u64(e, t[i].nr_clients);
		kv_emit_cell_u64(e, t[i].pages);
		kv_emit_cell_u64(e, t[i].min_pages);
		kv_emit_cell_u64(e, t[i].max_pages);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	return 0;
}

static const struct kv_emit_col quota_cols[] = {
	{ "ns", "NS", 3 }, { "tenant", "TENANT", 6 }, { "model", "MODEL", -24 },
	{ "pages", "PAGES", 7 }, { "min_pages", "MIN", 7 }, { "max_pages", "MAX", 7 },
	{ "blocks_used", "USED", 7 }, { "cached_blocks", "CACHED", 7 },
	{ "max_context", "MAX_CTX", 8 }, { "context_policy", "POLICY", -16 },
	{ "context_policies", "POLICIES", -24 },
};

/* The kinds a namespace takes, as kvd.conf's context_policies lists them. */
static void ctx_kinds(char *buf, size_t len, uint32_t refused)
{
	static const char *const kinds[] = { "none", "truncate", "window",
					     "sinks" };
	size_t n = 0;

	buf[0] = 0;
	for (unsigned k = 0; k < ARRAY_LEN(kinds); k++)
		if (!(refused & (1U << k)) && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s",
					      n ? "," : "", kinds[k]);
}

static void emit_ns_quota(struct kv_emit *e, const struct kv_admin_status *st,
			  const struct kv_admin_ns *ns)
{
	kv_emit_table_begin(e, "namespaces", quota_cols, ARRAY_LEN(quota_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char model[KV_MODEL_ID_MAX], pol[64], kinds[40];

		printable(model, ns[i].model_id);
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, ns[i].id);
		kv_emit_cell_u64(e, ns[i].tenant);
		kv_emit_cell_str(e, model);
		kv_emit_cell_u64(e, ns[i].pages);
		kv_emit_cell_u64(e, ns[i].min_pages);
		kv_emit_cell_u64(e, ns[i].max_pages);
		kv_emit_cell_u64(e, ns[i].blocks_used);
		kv_emit_cell_u64(e, ns[i].cached_blocks);
		kv_emit_cell_u64(e, ns[i].max_context);
		if (kv_ctx_policy_format(&ns[i].ctx_default, pol,
					 sizeof(pol)) < 0)
			snprintf(pol, sizeof(pol), "kind %u",
				 ns[i].ctx_default.kind);
		kv_emit_cell_str(e, pol);
		ctx_kinds(kinds, sizeof(kinds), ns[i].ctx_refused);
		kv_emit_cell_str(e, kinds);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	if (st->nr_records == KV_ADMIN_MAX_RECORDS) {
		kv_emit_u64(e, "truncated_at", "truncated at (rows)",
			    KV_ADMIN_MAX_RECORDS);
	}
}

static const struct kv_emit_col client_cols[] = {
	{ "id", "ID", 5 }, { "pid", "PID", 8 }, { "uid", "UID", 6 },
	{ "gid", "GID", 6 }, { "ns", "NS", 3 }, { "blocks", "BLOCKS", 8 },
	{ "refs", "REFS", 8 }, { "sq_entries", "SQ", 5 }, { "ops", "OPS", 10 },
};

static int kvctl_cmd_clients(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_status *st = r->st;
	const struct kv_admin_client *cl = r->rec;

	kv_emit_u64(e, "nr_clients", "clients", st->nr_clients);
	kv_emit_table_begin(e, "clients", client_cols,
			    ARRAY_LEN(client_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, cl[i].id);
		kv_emit_cell_u64(e, cl[i].pid);
		kv_emit_cell_u64(e, cl[i].uid);
		kv_emit_cell_u64(e, cl[i].gid);
		kv_emit_cell_u64(e, cl[i].ns_id);
		kv_emit_cell_u64(e, cl[i].blocks);
		kv_emit_cell_u64(e, cl[i].refs);
		kv_emit_cell_u64(e, cl[i].sq_entries);
		kv_emit_cell_u64(e, cl[i].ops);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	return 0;
}

/* kvctl disconnect ID: the client as it was when kvd ended it. */
static int kvctl_cmd_disconnect(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_client *cl = r->rec;

	if (r->st->nr_records != 1) {
		fprintf(stderr, "kvctl: disconnect: kvd's reply names no client\n");
		return 1;
	}
	kv_emit_u64(e, "disconnected", "disconnected client", cl->id);
	kv_emit_u64(e, "pid", "pid", cl->pid);
	kv_emit_u64(e, "ns", "namespace", cl->ns_id);
	kv_emit_u64(e, "blocks_released", "blocks released", cl->blocks);
	kv_emit_u64(e, "refs_released", "refs released", cl->refs);
	return 0;
}

static int kvctl_cmd_pin(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_pin *p = r->rec;

	if (r->st->nr_records != 1) {
		fprintf(stderr, "kvctl: pin: kvd's reply names no prefix\n");
		return 1;
	}
	kv_emit_u64(e, "ns", "namespace", p->ns_id);
	kv_emit_u64(e, "prefix_blocks", "blocks in the prefix", p->blocks);
	kv_emit_u64(e, "changed", p->ttl_ms ? "newly pinned" : "unpinned",
		    p->changed);
	kv_emit_u64(e, "pinned_blocks", "pinned in the namespace", p->pinned);
	kv_emit_u64(e, "ttl_s", "pinned for s", p->ttl_ms / 1000);
	return 0;
}

static const char *hint(int err)
{
	switch (err) {
	case -ENOENT:
	case -ECONNREFUSED:
		return " (is kvd running, and is this its admin socket?)";
	case -ETIMEDOUT:
		return " (kvd accepted but did not answer in 5 s)";
	case -EPIPE:
	case -ECONNRESET:
		return " (kvd closed the connection: not root, kvd's user or in its admin group? or too many admin connections at once)";
	case -EPROTO:
		return " (is this kvd's admin socket?)";
	}
	return "";
}

/* The reply is a WELCOME: @path is kvd's client socket. */
static bool is_client_socket(const void *buf, ssize_t n)
{
	const struct kv_admin_status *st = buf;

	return n >= 16 && st->magic == KV_MAGIC && st->type == KV_MSG_WELCOME;
}

/* Why the call to @path failed, on stderr. */
static void call_failed(const char *path, const void *buf, ssize_t n, int ret)
{
	if (ret == -EPROTO && is_client_socket(buf, n))
		fprintf(stderr, "kvctl: %s is kvd's client socket, not its admin socket (kvd-admin.sock beside it, or see kvd's --admin-socket)\n",
			path);
	else
		fprintf(stderr, "kvctl: %s: %s%s\n", path, strerror(-ret),
			hint(ret));
}


/* kvctl quota: the tenants' table, then the namespaces' (a second call). */
static int kvctl_cmd_quota(struct kv_emit *e, const struct kvctl_reply *r)
{
	const char *path = r->path;
	void *buf = calloc(1, REPLY_MAX);
	ssize_t n;
	int ret;

	if (!buf)
		return 1;
	kvctl_cmd_tenants(e, r);
	n = kv_admin_call(path, KV_ADMIN_STATUS, 0, 0, buf);
	ret = n < 0 ? (int)n : kv_admin_reply_check(buf, n, sizeof(struct kv_admin_ns));
	if (!ret)
		emit_ns_quota(e, buf, (void *)((struct kv_admin_status *)buf + 1));
	else
		call_failed(path, buf, n, ret);
	free(buf);
	return ret ? 1 : 0;
}

/* kvctl metrics: Prometheus text, from several calls (metrics.c). */
static int kvctl_cmd_metrics(struct kv_emit *e, const struct kvctl_reply *r)
{
	int ret = kv_metrics_write(stdout, r->path);

	if (ret)
		call_failed(r->path, NULL, 0, ret);
	return ret ? 1 : 0;
}

static int parse_u32(const char *opt, const char *s, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v >= UINT32_MAX) {
		fprintf(stderr, "kvctl: %s: '%s' is not a number below 2^32 - 1\n",
			opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static int kvctl_cmd_reload(struct kv_emit *e, const struct kvctl_reply *r)
{
	const struct kv_admin_msg *m = r->rec;

	kv_emit_str(e, "reloaded", "reloaded", m->text);
	return 0;
}

/* A block hash: 32 hex digits (kv_hash_blocks' canonical bytes). */
static int parse_hash(const char *s, struct kv_hash *h)
{
	static const char hex[] = "0123456789abcdefABCDEF";
	unsigned v;

	if (strlen(s) != 2 * sizeof(h->b) || strspn(s, hex) != strlen(s)) {
		fprintf(stderr, "kvctl: '%s' is not a block hash: 32 hex digits expected\n",
			s);
		return -1;
	}
	for (size_t i = 0; i < sizeof(h->b); i++) {
		sscanf(s + 2 * i, "%2x", &v);
		h->b[i] = (uint8_t)v;
	}
	return 0;
}

static ssize_t pin_call(const char *path, uint32_t code, uint32_t ns,
			uint32_t ttl_s, const struct kv_hash *hash, void *buf)
{
	struct kv_admin_pin_req req = {
		.req = { .magic = KV_MAGIC, .abi_major = KV_ABI_MAJOR,
			 .abi_minor = KV_ABI_MINOR, .type = KV_MSG_ADMIN,
			 .cmd = code, .arg = { ns, ttl_s } },
		.hash = *hash,
	};

	return kv_admin_send(path, &req, sizeof(req), buf);
}

/* pin and unpin's own refusals, said in their words: true if said. */
static bool pin_failed(uint32_t code, int err, uint32_t ns, const char *hash)
{
	const char *name = code == KV_ADMIN_PIN ? "pin" : "unpin";

	if (code != KV_ADMIN_PIN && code != KV_ADMIN_UNPIN)
		return false;
	if (err == -ENOENT)
		fprintf(stderr, "kvctl: no namespace %u (see kvctl status)\n", ns);
	else if (err == -ENXIO)
		fprintf(stderr, "kvctl: %s: namespace %u has no committed block of hash %s in its pool\n",
			name, ns, hash);
	else if (err == -EDQUOT)
		fprintf(stderr, "kvctl: pin: namespace %u's pins would keep slabs past half the pages its quota allows, or the pool's pinned slabs past half the pool (one pinned block keeps its slab; see kvctl status: PINNED, and kvctl unpin)\n",
			ns);
	else if (err == -EOPNOTSUPP || err == -EPROTO)
		fprintf(stderr, "kvctl: %s: kvd refused the request (%s): a kvd older than ABI 3.4 has no pins\n",
			name, strerror(-err));
	else
		return false;
	return true;
}

/* The options a command takes (struct kvctl_cmd.opts) */
#define OPT_TREE	1U	/* --tree: it is this row's, and needed */
#define OPT_NS		2U
#define OPT_DEPTH	4U
#define OPT_TIMEOUT	8U
#define OPT_ID		16U	/* one operand: a client id, or a hash
				 * (pin, unpin) */
#define OPT_TTL		32U
#define OPT_INTERVAL	64U	/* --interval: top */
#define OPT_ENDPOINT	128U	/* one operand, an endpoint: events */
#define OPT_COUNT	256U

struct kvctl_cmd {
	const char	*name;
	const char	*args;		/* its options, for the usage */
	unsigned	opts;		/* OPT_*: the options it takes */
	uint32_t	code;		/* KV_ADMIN_* */
	size_t		rec;		/* bytes of one reply record */
	int		(*run)(struct kv_emit *e, const struct kvctl_reply *r);
	const char	*help;		/* lines of the usage */
};

#define CMD(n, a, o, c, r, h)	{ .name = #n, .args = a, .opts = o, .code = c, \
				  .rec = sizeof(r), .run = kvctl_cmd_##n, .help = h }

static const struct kvctl_cmd cmds[] = {
	CMD(status, NULL, 0, KV_ADMIN_STATUS, struct kv_admin_ns,
	    "pool, pages and per-namespace blocks"),
	CMD(clients, NULL, 0, KV_ADMIN_CLIENTS, struct kv_admin_client,
	    "connected clients and the blocks they hold"),
	CMD(prefix, NULL, 0, KV_ADMIN_PREFIX, struct kv_admin_prefix,
	    "prefix cache per namespace: cached blocks, hits, evictions"),
	{ .name = "prefix", .args = "--tree [--ns N] [--depth D]",
	  .opts = OPT_TREE | OPT_NS | OPT_DEPTH, .code = KV_ADMIN_TREE,
	  .rec = sizeof(struct kv_admin_tree_node), .run = kvctl_cmd_prefix_tree,
	  .help = "the cached prefix tree of namespace N (default: the only\n"
		  "one), D levels\n"
		  "below the roots (default 3), children counts" },
	CMD(tenants, NULL, 0, KV_ADMIN_TENANTS, struct kv_admin_tenant,
	    "tenants, their clients and pages"),
	CMD(quota, NULL, 0, KV_ADMIN_TENANTS, struct kv_admin_tenant,
	    "pages and quotas (min/max) of tenants and namespaces"),
	CMD(reload, NULL, 0, KV_ADMIN_RELOAD, struct kv_admin_msg,
	    "re-read kvd.conf: tenants and quotas, clients stay"),
	CMD(check, NULL, 0, KV_ADMIN_CHECK, struct kv_admin_check,
	    "verify every namespace's books (free/held/cached, refs,\n"
	    "LRU, index) and the tiers'; exit 1 if any is broken"),
	CMD(tiers, NULL, 0, KV_ADMIN_TIERS, struct kv_admin_tier,
	    "the tiers behind the pool: bytes, blocks, demotions,\n"
	    "promotions, drops, checksum failures"),
	CMD(metrics, NULL, 0, KV_ADMIN_STATUS, struct kv_admin_ns,
	    "every figure above and per-opcode request counts and\n"
	    "service times, in the Prometheus text format"),
	{ .name = "evict", .args = "[--ns N]", .opts = OPT_NS,
	  .code = KV_ADMIN_EVICT, .rec = sizeof(struct kv_admin_prefix),
	  .run = kvctl_cmd_prefix,
	  .help = "drop the ref-0 cached blocks of every namespace, or of N;\n"
		  "exit 1 if there is no namespace N" },
	{ .name = "disconnect", .args = "ID", .opts = OPT_ID,
	  .code = KV_ADMIN_DISCONNECT, .rec = sizeof(struct kv_admin_client),
	  .run = kvctl_cmd_disconnect,
	  .help = "end client ID (see clients) and release its blocks, as if\n"
		  "it had exited; exit 1 if there is no such client" },
	{ .name = "pin", .args = "[--ns N] [--ttl S] HASH", .opts = OPT_ID |
	  OPT_NS | OPT_TTL, .code = KV_ADMIN_PIN,
	  .rec = sizeof(struct kv_admin_pin), .run = kvctl_cmd_pin,
	  .help = "keep the prefix ending at the block of HASH (32 hex digits,\n"
		  "as kv_hash_blocks gives it) in the pool of namespace N\n"
		  "(default: the only one) for S seconds (default 3600): that\n"
		  "block and its ancestors, never evicted until then" },
	{ .name = "unpin", .args = "[--ns N] HASH|all", .opts = OPT_ID | OPT_NS,
	  .code = KV_ADMIN_UNPIN, .rec = sizeof(struct kv_admin_pin),
	  .run = kvctl_cmd_pin,
	  .help = "drop the pins of the prefix ending at the block of HASH,\n"
		  "or (all) every pin of namespace N" },
	{ .name = "wait", .args = "[--timeout S]", .opts = OPT_TIMEOUT,
	  .code = KV_ADMIN_STATUS, .rec = sizeof(struct kv_admin_ns),
	  .help = "wait until kvd answers on the admin socket (at most S\n"
		  "seconds, default 30); exit 1 if it does not" },
	{ .name = "events", .args = "[--count N] ENDPOINT",
	  .opts = OPT_ID | OPT_ENDPOINT | OPT_COUNT,
	  .code = KV_ADMIN_STATUS, .rec = sizeof(struct kv_admin_ns),
	  .help = "follow the KV events kvd publishes at ENDPOINT (kvd\n"
		  "--kv-events) as JSON lines, N of them (default: until ^C)" },
	{ .name = "top", .args = "[--interval MS]", .opts = OPT_INTERVAL,
	  .code = KV_ADMIN_STATUS, .rec = sizeof(struct kv_admin_ns),
	  .help = "a live view, redrawn every MS ms (default 1000): pool use\n"
		  "and its history, namespaces' blocks, hit ratios, evictions\n"
		  "per second, clients, tiers; q quits, p pauses" },
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* kvd is not there yet, or not listening yet: worth asking again. */
static bool not_up_yet(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -ETIMEDOUT ||
	       err == -EAGAIN;
}

/* Something other than a socket at @path: no kvd will ever listen there. */
static bool not_a_socket(const char *path)
{
	struct stat st;

	return !lstat(path, &st) && !S_ISSOCK(st.st_mode);
}

/*
 * kvctl wait: ask @path for kvd's status every 50 ms until it answers
 * or @timeout_s pass, so that a script can start kvd and then use it.
 * Any other error (a socket that is not kvd's admin socket, no
 * permission) ends the wait at once.
 */
static int kvctl_wait(struct kv_emit *e, const char *path, uint32_t timeout_s,
		      void *buf)
{
	uint64_t end = now_ms() + (uint64_t)timeout_s * 1000;
	const struct kv_admin_status *st = buf;
	ssize_t n;
	int ret;

	for (;;) {
		n = kv_admin_call(path, KV_ADMIN_STATUS, 0, 0, buf);
		ret = n < 0 ? (int)n :
		      kv_admin_reply_check(st, n, sizeof(struct kv_admin_ns));
		if (!ret)
			break;
		if (!not_up_yet(ret) || not_a_socket(path)) {
			call_failed(path, buf, n, ret);
			return 1;
		}
		if (now_ms() >= end) {
			fprintf(stderr, "kvctl: kvd did not answer on %s within %u s (last: %s)\n",
				path, timeout_s, strerror(-ret));
			return 1;
		}
		usleep(50000);
	}
	kv_emit_begin(e, stdout, e->json);
	kv_emit_bool(e, "ready", "ready", true);
	kv_emit_u64(e, "pid", "kvd pid", st->pid);
	emit_version(e, st);
	kv_emit_end(e);
	return 0;
}

/*
 * prefix --tree without --ns: the one live namespace's number (kvd's
 * numbers are not slots, so there is no "namespace 0" to default to).
 * 0, or the exit status after saying why.
 */
static int only_namespace(const char *path, void *buf, uint32_t *ns)
{
	const struct kv_admin_status *st = buf;
	const struct kv_admin_prefix *r = (const void *)(st + 1);
	ssize_t n = kv_admin_call(path, KV_ADMIN_PREFIX, 0, 0, buf);
	int ret = n < 0 ? (int)n :
		  kv_admin_reply_check(st, n, sizeof(struct kv_admin_prefix));

	if (ret) {
		call_failed(path, buf, n, ret);
		return 1;
	}
	if (!st->nr_records) {
		fprintf(stderr, "kvctl: no namespace yet: no client has connected a model\n");
		return 1;
	}
	if (st->nr_records != 1) {
		fprintf(stderr, "kvctl: %u namespaces: say which with --ns N (see kvctl prefix)\n",
			st->nr_records);
		return 1;
	}
	*ns = r->ns_id;
	return 0;
}

#define HELP_COL	12	/* where the help lines start */

/* One command's lines: name and options, then its help from HELP_COL. */
static void usage_cmd(FILE *f, const struct kvctl_cmd *c)
{
	const char *h = c->help, *nl;
	int n;

	n = fprintf(f, "  %s%s%s", c->name, c->args ? " " : "",
		    c->args ? c->args : "");
	if (n < HELP_COL)
		fprintf(f, "%*s", HELP_COL - n, "");
	else
		fprintf(f, "\n%*s", HELP_COL, "");
	while ((nl = strchr(h, '\n'))) {
		fprintf(f, "%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
		h = nl + 1;
	}
	fprintf(f, "%s\n", h);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvctl [-a|--admin-socket PATH] [--json] COMMAND [OPTIONS]\n"
		   "       kvctl --version | --help\n"
		   "commands:\n");
	for (int i = 0; i < ARRAY_LEN(cmds); i++)
		usage_cmd(f, &cmds[i]);
	fprintf(f,
"The admin socket defaults to $KVD_ADMIN_SOCKET, else kvd-admin.sock beside\n"
"$KVD_SOCKET, else /run/kvd/kvd-admin.sock as root and\n"
"$XDG_RUNTIME_DIR/kvd-admin.sock otherwise (where kvd puts it).\n");
}

/*
 * The row of command @name (with --tree if @opts has OPT_TREE); NULL
 * with a message when there is none or it does not take @opts.
 */
static const struct kvctl_cmd *find_cmd(const char *name, unsigned opts)
{
	bool known = false;

	for (int i = 0; i < ARRAY_LEN(cmds); i++) {
		const struct kvctl_cmd *c = &cmds[i];

		if (strcmp(c->name, name))
			continue;
		known = true;
		if ((c->opts & OPT_TREE) == (opts & OPT_TREE) &&
		    !(opts & ~c->opts))
			return c;
	}
	if (!known) {
		fprintf(stderr, "kvctl: unknown command '%s'\n", name);
		usage(stderr);
	} else {
		fprintf(stderr, "kvctl: --tree, --ns and --depth go with prefix --tree or evict, --timeout with wait, --interval with top, --count and an ENDPOINT with events, an ID with disconnect, a HASH (and --ns, --ttl) with pin and unpin\n");
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "tree", no_argument, NULL, 't' },
		{ "ns", required_argument, NULL, 'n' },
		{ "depth", required_argument, NULL, 'd' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "ttl", required_argument, NULL, 'L' },
		{ "interval", required_argument, NULL, 'I' },
		{ "count", required_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 }
	};
	const char *opt_path = NULL;
	uint32_t ns = UINT32_MAX, depth = 3, timeout_s = 30, id = 0;
	uint32_t ttl_s = 3600, interval_ms = 1000, count = 0;
	struct kv_hash hash;
	const struct kvctl_cmd *cmd;
	struct kv_admin_status *st;
	unsigned given = 0;
	bool json = false;
	struct kv_emit e;
	char path[108];
	ssize_t n;
	void *buf;
	int o, ret;

	while ((o = getopt_long(argc, argv, "a:jhV", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			opt_path = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 't':
			given |= OPT_TREE;
			break;
		case 'n':
			if (parse_u32("--ns", optarg, &ns))
				return 2;
			given |= OPT_NS;
			break;
		case 'd':
			if (parse_u32("--depth", optarg, &depth))
				return 2;
			given |= OPT_DEPTH;
			break;
		case 'T':
			if (parse_u32("--timeout", optarg, &timeout_s))
				return 2;
			given |= OPT_TIMEOUT;
			break;
		case 'L':
			if (parse_u32("--ttl", optarg, &ttl_s))
				return 2;
			if (!ttl_s || ttl_s > KV_PIN_MAX_MS / 1000) {
				fprintf(stderr, "kvctl: --ttl: %u is not 1 to %llu seconds (a week)\n",
					ttl_s, KV_PIN_MAX_MS / 1000);
				return 2;
			}
			given |= OPT_TTL;
			break;
		case 'I':
			if (parse_u32("--interval", optarg, &interval_ms))
				return 2;
			if (interval_ms < 10 || interval_ms > 3600000) {
				fprintf(stderr, "kvctl: --interval: %u is not 10 to 3600000 ms\n",
					interval_ms);
				return 2;
			}
			given |= OPT_INTERVAL;
			break;
		case 'C':
			if (parse_u32("--count", optarg, &count))
				return 2;
			given |= OPT_COUNT;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvctl %s (ABI %u.%u)\n", KV_VERSION, KV_ABI_MAJOR,
			       KV_ABI_MINOR);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc || argc - optind > 2) {
		fprintf(stderr, "kvctl: %s\n", optind == argc ?
			"no command given" : "one command expected");
		usage(stderr);
		return 2;
	}
	if (argc - optind == 2)
		given |= OPT_ID;
	cmd = find_cmd(argv[optind], given);
	if (!cmd)
		return 2;
	if (cmd->opts & OPT_ENDPOINT) {
		if (!(given & OPT_ID)) {
			fprintf(stderr, "kvctl: events needs the ENDPOINT kvd publishes at (kvd --kv-events, e.g. tcp://127.0.0.1:5557)\n");
			return 2;
		}
		return kvctl_events(argv[optind + 1], count);
	}
	if (cmd->code == KV_ADMIN_PIN || cmd->code == KV_ADMIN_UNPIN) {
		if (!(given & OPT_ID)) {
			fprintf(stderr, "kvctl: %s needs the HASH of a prefix's last block%s\n",
				cmd->name, cmd->code == KV_ADMIN_UNPIN ?
				", or all" : "");
			return 2;
		}
		if (cmd->code == KV_ADMIN_UNPIN &&
		    !strcmp(argv[optind + 1], "all"))
			memset(&hash, 0, sizeof(hash));	/* the root: all */
		else if (parse_hash(argv[optind + 1], &hash))
			return 2;
	} else if (cmd->opts & OPT_ID) {
		if (!(given & OPT_ID)) {
			fprintf(stderr, "kvctl: %s needs a client id (see kvctl clients)\n",
				cmd->name);
			return 2;
		}
		if (parse_u32("client id", argv[optind + 1], &id))
			return 2;
		ns = id;	/* arg[0] */
	}
	if (admin_path(opt_path, path, sizeof(path))) {
		fprintf(stderr, "kvctl: admin socket path too long\n");
		return 2;
	}
	buf = calloc(1, REPLY_MAX);
	if (!buf)
		return 1;
	if ((cmd->code == KV_ADMIN_TREE || cmd->code == KV_ADMIN_PIN ||
	     cmd->code == KV_ADMIN_UNPIN) && ns == UINT32_MAX &&
	    (ret = only_namespace(path, buf, &ns))) {
		free(buf);
		return ret;
	}
	if (cmd->opts & OPT_INTERVAL) {
		free(buf);	/* top keeps replies of its own */
		return kvctl_top(path, interval_ms);
	}
	if (cmd->opts & OPT_TIMEOUT) {
		e.json = json;
		ret = kvctl_wait(&e, path, timeout_s, buf);
		free(buf);
		return ret;
	}
	if (cmd->code == KV_ADMIN_PIN || cmd->code == KV_ADMIN_UNPIN)
		n = pin_call(path, cmd->code, ns, cmd->code == KV_ADMIN_PIN ?
			     ttl_s : 0, &hash, buf);
	else
		n = kv_admin_call(path, cmd->code, ns, depth, buf);
	st = buf;
	ret = n < 0 ? (int)n : kv_admin_reply_check(st, n, cmd->rec);
	if (ret && cmd->code == KV_ADMIN_RELOAD &&
	    n >= (ssize_t)(sizeof(*st) + sizeof(struct kv_admin_msg))) {
		struct kv_admin_msg *m = (void *)(st + 1);

		m->text[sizeof(m->text) - 1] = 0;
		fprintf(stderr, "kvctl: reload: %s\n", m->text);
		free(buf);
		return 1;
	}
	if (ret) {
		if (ret == -ENOENT && n > 0 && (cmd->code == KV_ADMIN_TREE ||
						cmd->code == KV_ADMIN_EVICT))
			fprintf(stderr, "kvctl: no namespace %u (see kvctl status)\n",
				ns);
		else if (n > 0 && pin_failed(cmd->code, ret, ns, argv[optind + 1]))
			;
		else if (ret == -ENOENT && n > 0 &&
			 cmd->code == KV_ADMIN_DISCONNECT)
			fprintf(stderr, "kvctl: no client %u (see kvctl clients)\n",
				id);
		else
			call_failed(path, buf, n, ret);
		free(buf);
		return 1;
	}
	kv_emit_begin(&e, stdout, json);
	ret = cmd->run(&e, &(struct kvctl_reply){ path, st, st + 1 });
	kv_emit_end(&e);
	free(buf);
	return ret;
}
