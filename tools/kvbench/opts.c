// SPDX-License-Identifier: MIT
/*
 * kvbench's one option parser: one table of every option (getopt_long
 * reads it), each option in one group or more; the mode-selecting
 * options pick an entry of the mode table, and an option in none of
 * that mode's groups is refused by name. Then the checks between
 * options, and what follows from them (the geometry of each model, the
 * ring sizes, the admin socket, the policies of --policy).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opts.h"
#include "../trace.h"

enum {
	OPT_MIN_TOKENS = 256,
	OPT_MAX_TOKENS,
	OPT_SEED,
	OPT_LAYERS,
	OPT_KV_HEADS,
	OPT_HEAD_DIM,
	OPT_BLOCK_TOKENS,
	OPT_DTYPE,
	OPT_QUANT,
	OPT_MODEL,
	OPT_JSON,
	OPT_TRACE,
	OPT_SYNTHETIC,
	OPT_TRACE_BLOCK,
	OPT_LIMIT,
	OPT_TIMESTAMPS,
	OPT_COMPARE,
	OPT_MAX_MODEL_LEN,
	OPT_DECODE_CHUNK,
	OPT_SALT,
	OPT_MODELS,
	OPT_PHASE_REQUESTS,
	OPT_SAMPLE_MS,
	OPT_ADMIN_SOCKET,
	OPT_PRIVATE_KVD,
	OPT_HOST_TIER_SIZE,
	OPT_DISK_TIER_SIZE,
	OPT_DISK_TIER_PATH,
	OPT_NO_FIO,
	OPT_COMPARE_TIER,
	OPT_NO_VERIFY,
	OPT_PERF_STAT,
	OPT_KVD,
	OPT_RUNS,
	OPT_ITERATIONS,
	OPT_POLICY,
	OPT_MAX_CONTEXT,
	OPT_GEN_TOKENS,
	OPT_PROMPT_TOKENS,
	OPT_SEQS,
	OPT_QUICK,
	OPT_MODE,	/* OPT_MODE + enum kvb_mode: selects that mode */
};

#define OG_ANY		0U	/* every mode takes it */
#define OG_MODE		0U	/* selects the mode: checked apart */
#define OG_ENGINES	(KVB_OG_FLEET | KVB_OG_LONGGEN)	/* engine processes */

/* Every option of every mode; group: the modes that take it. */
static const struct kvb_optdef {
	const char	*name;
	int		has_arg;
	int		val;
	unsigned	group;
} optdefs[] = {
	{ "socket",	  required_argument, 's', KVB_OG_KVD },
	{ "procs",	  required_argument, 'p', OG_ENGINES },
	{ "requests",	  required_argument, 'n', KVB_OG_LOAD },
	{ "min-tokens",	  required_argument, OPT_MIN_TOKENS, KVB_OG_LOAD },
	{ "max-tokens",	  required_argument, OPT_MAX_TOKENS, KVB_OG_LOAD },
	{ "batch",	  required_argument, 'b', KVB_OG_LOAD },
	{ "live",	  required_argument, 'l', KVB_OG_FLEET },
	{ "seed",	  required_argument, OPT_SEED, KVB_OG_FLEET },
	{ "layers",	  required_argument, OPT_LAYERS, OG_ENGINES },
	{ "kv-heads",	  required_argument, OPT_KV_HEADS, OG_ENGINES },
	{ "head-dim",	  required_argument, OPT_HEAD_DIM, OG_ENGINES },
	{ "block-tokens", required_argument, OPT_BLOCK_TOKENS, OG_ENGINES },
	{ "dtype",	  required_argument, OPT_DTYPE, OG_ENGINES },
	{ "quant",	  required_argument, OPT_QUANT, OG_ENGINES },
	{ "model",	  required_argument, OPT_MODEL, OG_ENGINES },
	{ "json",	  required_argument, OPT_JSON, KVB_OG_JSON },
	{ "trace",	  required_argument, OPT_TRACE, OG_MODE },
	{ "synthetic",	  no_argument,	     OPT_SYNTHETIC, OG_MODE },
	{ "trace-block",  required_argument, OPT_TRACE_BLOCK, KVB_OG_REPLAY },
	{ "limit",	  required_argument, OPT_LIMIT, KVB_OG_REPLAY },
	{ "timestamps",	  optional_argument, OPT_TIMESTAMPS, KVB_OG_REPLAY },
	{ "compare-allocators", no_argument, OPT_COMPARE, KVB_OG_REPLAY },
	{ "max-model-len", required_argument, OPT_MAX_MODEL_LEN, KVB_OG_REPLAY },
	{ "decode-chunk", required_argument, OPT_DECODE_CHUNK, KVB_OG_REPLAY },
	{ "salt",	  required_argument, OPT_SALT, KVB_OG_REPLAY },
	{ "models",	  required_argument, OPT_MODELS, KVB_OG_REPLAY },
	{ "phase-requests", required_argument, OPT_PHASE_REQUESTS, KVB_OG_REPLAY },
	{ "sample-ms",	  required_argument, OPT_SAMPLE_MS,
	  KVB_OG_REPLAY | KVB_OG_LONGGEN },
	{ "admin-socket", required_argument, OPT_ADMIN_SOCKET, KVB_OG_ADMIN },
	{ "private-kvd",  optional_argument, OPT_PRIVATE_KVD, OG_ENGINES },
	{ "host-tier-size", required_argument, OPT_HOST_TIER_SIZE, KVB_OG_REPLAY },
	{ "disk-tier-size", required_argument, OPT_DISK_TIER_SIZE, KVB_OG_REPLAY },
	{ "disk-tier-path", required_argument, OPT_DISK_TIER_PATH, KVB_OG_REPLAY },
	{ "no-fio",	  no_argument,	     OPT_NO_FIO, KVB_OG_REPLAY },
	{ "compare-tier", no_argument,	     OPT_COMPARE_TIER, KVB_OG_REPLAY },
	{ "no-verify",	  no_argument,	     OPT_NO_VERIFY, KVB_OG_FLEET },
	{ "perf-stat",	  no_argument,	     OPT_PERF_STAT, KVB_OG_FLEET },
	{ "kvd",	  required_argument, OPT_KVD, KVB_OG_KVD },
	{ "runs",	  required_argument, OPT_RUNS, KVB_OG_RUNS },
	{ "iterations",	  required_argument, OPT_ITERATIONS, KVB_OG_ITERS },
	{ "policy",	  required_argument, OPT_POLICY, OG_MODE },
	{ "max-context",  required_argument, OPT_MAX_CONTEXT, KVB_OG_LONGGEN },
	{ "gen-tokens",	  required_argument, OPT_GEN_TOKENS, KVB_OG_LONGGEN },
	{ "prompt-tokens", required_argument, OPT_PROMPT_TOKENS, KVB_OG_LONGGEN },
	{ "seqs",	  required_argument, OPT_SEQS, KVB_OG_LONGGEN },
	{ "quick",	  no_argument,	     OPT_QUICK, KVB_OG_LONGGEN },
	{ "verbose",	  no_argument,	     'v', KVB_OG_LONGGEN },
	{ "workload",	  required_argument, OPT_MODE + KVB_MODE_WORKLOAD, OG_MODE },
	{ "floor",	  no_argument,	     OPT_MODE + KVB_MODE_FLOOR, OG_MODE },
	{ "hash-bench",	  no_argument,	     OPT_MODE + KVB_MODE_HASH, OG_MODE },
	{ "redis",	  no_argument,	     OPT_MODE + KVB_MODE_REDIS, OG_MODE },
	{ "bench-summary", required_argument, OPT_MODE + KVB_MODE_SUMMARY, OG_MODE },
	{ "quiet",	  no_argument,	     'q', OG_ANY },
	{ "help",	  no_argument,	     'h', OG_ANY },
	{ "version",	  no_argument,	     'V', OG_ANY },
};

#define NR_OPTDEFS	(sizeof(optdefs) / sizeof(optdefs[0]))

/* Where each group's options go, for the message that refuses one. */
static const char *const og_home[KVB_NR_OG] = {
	"a mode that writes a report",
	"a mode that uses kvd",
	"a replay or --workload",
	"the alloc/release benchmark or a replay",
	"the alloc/release benchmark",
	"a replay (--trace or --synthetic)",
	"--workload",
	"--floor or --redis",
	"--policy",
};

static int parse_num(const char *name, const char *s, int base, uint64_t min,
		     uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, base);
	if (!isdigit((unsigned char)*s) || errno || *end || v < min ||
	    v > max) {
		fprintf(stderr, "kvbench: %s: '%s' is not a number in %llu..%llu\n",
			name, s, (unsigned long long)min,
			(unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_uint(const char *name, const char *s, unsigned min,
		      unsigned max, unsigned *out)
{
	uint64_t v;

	if (parse_num(name, s, 10, min, max, &v))
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* A tier's size: kvd parses it (kvd.conf(5) sizes), and says so if
 * wrong; here only that it starts as a size does. */
static int parse_size(const char *name, const char *arg, const char **out)
{
	if (!isdigit((unsigned char)*arg)) {
		fprintf(stderr, "kvbench: %s: '%s' is not a size (bytes, with K, M, G or T)\n",
			name, arg);
		return -1;
	}
	*out = arg;
	return 0;
}

static int parse_scale(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	if (!*s || errno || *end || !(*out >= 0 && *out <= 1e6)) {
		fprintf(stderr, "kvbench: --timestamps: '%s' is not a scale in 0..1e6\n",
			s);
		return -1;
	}
	return 0;
}

static int parse_dtype(const char *s, __u32 *out)
{
	static const struct { const char *name; __u32 dtype; } names[] = {
		{ "fp16", KV_DTYPE_FP16 },	{ "bf16", KV_DTYPE_BF16 },
		{ "fp32", KV_DTYPE_FP32 },	{ "fp8", KV_DTYPE_FP8_E4M3 },
		{ "fp8-e4m3", KV_DTYPE_FP8_E4M3 }, { "fp8_e4m3", KV_DTYPE_FP8_E4M3 },
		{ "int8", KV_DTYPE_INT8 },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcmp(s, names[i].name)) {
			*out = names[i].dtype;
			return 0;
		}
	}
	fprintf(stderr, "kvbench: --dtype: unknown dtype '%s' (fp16, bf16, fp32, fp8 or int8)\n",
		s);
	return -1;
}

static int parse_quant(const char *s, struct kvb_opts *o)
{
	static const char *const names[KV_QUANT__MAX] = {
		[KV_QUANT_NONE] = "none", [KV_QUANT_TOKEN] = "token",
		[KV_QUANT_CHANNEL] = "channel",
	};

	for (uint32_t q = 0; q < KV_QUANT__MAX; q++) {
		if (!strcmp(s, names[q])) {
			o->geom.quant = q;
			o->quant_given = true;
			return 0;
		}
	}
	fprintf(stderr, "kvbench: --quant: unknown scheme '%s' (token, channel or none)\n",
		s);
	return -1;
}

const char *kvb_quant_name(uint32_t q)
{
	return q == KV_QUANT_TOKEN ? "token" : q == KV_QUANT_CHANNEL ?
	       "channel" : "none";
}

/* fp8 and int8 carry per-token scales unless told otherwise (as vLLM's
 * fp8 cache does); scales only with those dtypes. */
static int quant_setup(struct kvb_opts *o)
{
	bool q8 = o->geom.dtype == KV_DTYPE_FP8_E4M3 ||
		  o->geom.dtype == KV_DTYPE_INT8;

	if (!o->quant_given && q8)
		o->geom.quant = KV_QUANT_TOKEN;
	if (o->geom.quant && !q8) {
		fprintf(stderr, "kvbench: --quant %s needs --dtype fp8 or int8\n",
			kvb_quant_name(o->geom.quant));
		return -1;
	}
	return 0;
}

static void opts_default(struct kvb_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->model = "kvbench";
	o->dtype_name = "fp16";
	o->procs = 4;
	o->requests = 2000;
	o->min_tokens = 64;
	o->max_tokens = 2048;
	o->batch = 1;
	o->live = 8;
	o->seed = 1;
	o->geom.layers = 4;
	o->geom.kv_heads = 2;
	o->geom.head_dim = 64;
	o->geom.block_tokens = 16;
	o->geom.dtype = KV_DTYPE_FP16;
	o->trace_block = KVB_DEFAULT_TRACE_BLOCK;
	o->ts_scale = 1;
	o->models = 1;
	o->runs = KVB_DEFAULT_RUNS;
	o->iters = KVB_DEFAULT_ITERS;
	o->seqs = KVB_LG_SEQS;
}

static const struct kvb_optdef *optdef(int val)
{
	for (size_t i = 0; i < NR_OPTDEFS; i++)
		if (optdefs[i].val == val)
			return &optdefs[i];
	return NULL;
}

/* The mode-selecting options: one mode per run (it may repeat). */
static int set_mode(struct kvb_opts *o, enum kvb_mode m, const char *name,
		    const char *arg)
{
	if (o->mode_opt && o->mode != m) {
		fprintf(stderr, "kvbench: --%s and --%s: one mode at a time\n",
			o->mode_opt, name);
		return -1;
	}
	o->mode = m;
	o->mode_opt = name;
	o->mode_arg = arg;
	return 0;
}

/* The long-generation options (--policy and its group). */
static int parse_longgen(struct kvb_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case OPT_POLICY:
		if (o->nr_policy_args == KVB_MAX_POLICIES) {
			fprintf(stderr, "kvbench: --policy: at most %u of them\n",
				KVB_MAX_POLICIES);
			return -1;
		}
		o->policy_arg[o->nr_policy_args++] = arg;
		return set_mode(o, KVB_MODE_LONGGEN, "policy", NULL);
	case OPT_MAX_CONTEXT:
		o->lg_given |= KVB_LG_GIVEN_CONTEXT;
		return parse_uint("--max-context", arg, 0, KVB_MAX_TRACE_TOKENS,
				  &o->max_context);
	case OPT_GEN_TOKENS:
		o->lg_given |= KVB_LG_GIVEN_GEN;
		return parse_uint("--gen-tokens", arg, 1, UINT32_MAX / 2,
				  &o->gen_tokens);
	case OPT_PROMPT_TOKENS:
		o->lg_given |= KVB_LG_GIVEN_PROMPT;
		return parse_uint("--prompt-tokens", arg, 1,
				  KVB_MAX_TRACE_TOKENS, &o->prompt_tokens);
	case OPT_SEQS:
		return parse_uint("--seqs", arg, 1, KVB_MAX_SEQS, &o->seqs);
	case OPT_QUICK:
		o->quick = true;
		return 0;
	case 'v':
		o->verbose = true;
		return 0;
	}
	return -1;
}

/* One option; returns 0, or -1 after saying what is wrong. */
static int parse_one(struct kvb_opts *o, int opt, const char *arg)
{
	if (opt >= OPT_MODE && opt < OPT_MODE + KVB_NR_MODES)
		return set_mode(o, (enum kvb_mode)(opt - OPT_MODE),
				optdef(opt)->name, arg);
	switch (opt) {
	case 's':
		o->socket = arg;
		if (!*arg) {
			fprintf(stderr, "kvbench: --socket: empty path\n");
			return -1;
		}
		return 0;
	case 'p':
		o->lg_given |= KVB_LG_GIVEN_PROCS;
		return parse_uint("--procs", arg, 1, KVB_MAX_PROCS, &o->procs);
	case 'n':
		return parse_uint("--requests", arg, 1, KVB_MAX_REQUESTS,
				  &o->requests);
	case OPT_MIN_TOKENS:
		return parse_uint("--min-tokens", arg, 1, KVB_MAX_TOKENS,
				  &o->min_tokens);
	case OPT_MAX_TOKENS:
		return parse_uint("--max-tokens", arg, 1, KVB_MAX_TOKENS,
				  &o->max_tokens);
	case 'b':
		return parse_uint("--batch", arg, 1, KVB_MAX_BATCH, &o->batch);
	case 'l':
		return parse_uint("--live", arg, 1, KVB_MAX_LIVE, &o->live);
	case OPT_SEED:
		return parse_num("--seed", arg, 0, 0, UINT64_MAX, &o->seed);
	case OPT_LAYERS:
		return parse_uint("--layers", arg, 1, 1024, &o->geom.layers);
	case OPT_KV_HEADS:
		return parse_uint("--kv-heads", arg, 1, 1024,
				  &o->geom.kv_heads);
	case OPT_HEAD_DIM:
		return parse_uint("--head-dim", arg, 1, 1024,
				  &o->geom.head_dim);
	case OPT_BLOCK_TOKENS:
		return parse_uint("--block-tokens", arg, 1, 1024,
				  &o->geom.block_tokens);
	case OPT_DTYPE:
		o->dtype_name = arg;
		return parse_dtype(arg, &o->geom.dtype);
	case OPT_QUANT:
		return parse_quant(arg, o);
	case OPT_MODEL:
		o->model = arg;
		if (!*arg || strlen(arg) >= KV_MODEL_ID_MAX) {
			fprintf(stderr, "kvbench: --model: '%s' must be 1..%d bytes\n",
				arg, KV_MODEL_ID_MAX - 1);
			return -1;
		}
		return 0;
	case OPT_JSON:
		o->json_path = arg;
		return 0;
	case OPT_TRACE:
		if (!*arg) {
			fprintf(stderr, "kvbench: --trace: empty path\n");
			return -1;
		}
		o->trace_path = arg;
		return set_mode(o, KVB_MODE_REPLAY, "trace", NULL);
	case OPT_SYNTHETIC:
		o->synthetic = true;
		return set_mode(o, KVB_MODE_REPLAY, "synthetic", NULL);
	case OPT_TRACE_BLOCK:
		return parse_uint("--trace-block", arg, 1, 65536,
				  &o->trace_block);
	case OPT_LIMIT:
		return parse_uint("--limit", arg, 1, 1U << 26, &o->limit);
	case OPT_TIMESTAMPS:
		o->timestamps = true;
		return arg ? parse_scale(arg, &o->ts_scale) : 0;
	case OPT_COMPARE:
		o->compare = true;
		return 0;
	case OPT_MAX_MODEL_LEN:
		return parse_uint("--max-model-len", arg, 1,
				  KVB_MAX_TRACE_TOKENS, &o->max_model_len);
	case OPT_DECODE_CHUNK:
		o->chunk_given = true;
		return parse_uint("--decode-chunk", arg, 0,
				  KVB_MAX_TRACE_TOKENS, &o->decode_chunk);
	case OPT_SALT:
		o->salt_given = true;
		return parse_num("--salt", arg, 0, 0, UINT64_MAX, &o->salt);
	case OPT_MODELS:
		return parse_uint("--models", arg, 1, KVB_MAX_MODELS,
				  &o->models);
	case OPT_PHASE_REQUESTS:
		o->phase_given = true;
		return parse_uint("--phase-requests", arg, 1, 1U << 26,
				  &o->phase_requests);
	case OPT_SAMPLE_MS:
		o->sample_given = true;
		return parse_uint("--sample-ms", arg, 10, 60000,
				  &o->sample_ms);
	case OPT_ADMIN_SOCKET:
		o->admin_socket = arg;
		if (!*arg || strlen(arg) >= sizeof(o->admin_path)) {
			fprintf(stderr, "kvbench: --admin-socket: '%s' must be 1..%zu bytes\n",
				arg, sizeof(o->admin_path) - 1);
			return -1;
		}
		return 0;
	case OPT_NO_VERIFY:
		o->no_verify = true;
		return 0;
	case OPT_PERF_STAT:
		o->perf_stat = true;
		return 0;
	case OPT_PRIVATE_KVD:
		o->private_pool = arg ? arg : KVB_PRIVATE_POOL;
		return 0;
	case OPT_KVD:
		o->kvd_bin = arg;
		return 0;
	case OPT_HOST_TIER_SIZE:
		return parse_size("--host-tier-size", arg, &o->host_tier);
	case OPT_DISK_TIER_SIZE:
		return parse_size("--disk-tier-size", arg, &o->disk_tier);
	case OPT_DISK_TIER_PATH:
		if (!*arg || strlen(arg) >= KVB_PATH_MAX) {
			fprintf(stderr, "kvbench: --disk-tier-path: '%s' must be 1..%d bytes\n",
				arg, KVB_PATH_MAX - 1);
			return -1;
		}
		o->disk_tier_path = arg;
		return 0;
	case OPT_NO_FIO:
		o->no_fio = true;
		return 0;
	case OPT_COMPARE_TIER:
		o->compare_tier = true;
		return 0;
	case OPT_RUNS:
		return parse_uint("--runs", arg, 1, KVB_MAX_RUNS, &o->runs);
	case OPT_ITERATIONS:
		return parse_uint("--iterations", arg, 1, KVB_MAX_ITERS,
				  &o->iters);
	case 'q':
		o->quiet = true;
		return 0;
	}
	return parse_longgen(o, opt, arg);
}

static int check_replay(const struct kvb_opts *o)
{
	if (o->trace_path && o->synthetic) {
		fprintf(stderr, "kvbench: --trace and --synthetic exclude each other\n");
		return -1;
	}
	/* A kvd of --socket has the tier it was started with. */
	if (o->host_tier && !o->private_pool) {
		fprintf(stderr, "kvbench: --host-tier-size sizes the tier of the kvd --private-kvd starts; give --private-kvd (a kvd of --socket keeps its own: kvd --host-tier-size)\n");
		return -1;
	}
	if (o->disk_tier && !o->private_pool) {
		fprintf(stderr, "kvbench: --disk-tier-size sizes the disk tier of the kvd --private-kvd starts; give --private-kvd (a kvd of --socket keeps its own: kvd --disk-tier-size)\n");
		return -1;
	}
	/* kvd refuses it too; said here before a kvd is started */
	if (o->disk_tier && !o->host_tier) {
		fprintf(stderr, "kvbench: --disk-tier-size needs a host tier above it: give --host-tier-size too\n");
		return -1;
	}
	if (o->disk_tier_path && !o->disk_tier) {
		fprintf(stderr, "kvbench: --disk-tier-path goes with --disk-tier-size\n");
		return -1;
	}
	if (o->no_fio && !o->disk_tier) {
		fprintf(stderr, "kvbench: --no-fio goes with --disk-tier-size (fio runs beside the disk tier's promotion pass)\n");
		return -1;
	}
	if (o->disk_tier && o->models > 1) {
		fprintf(stderr, "kvbench: --disk-tier-size measures one model's promotions; not with --models %u\n",
			o->models);
		return -1;
	}
	if (o->compare_tier && !o->host_tier) {
		fprintf(stderr, "kvbench: --compare-tier replays without the tiers, then with them: give --private-kvd and --host-tier-size (and --disk-tier-size for a disk tier)\n");
		return -1;
	}
	return 0;
}

/*
 * The admin socket: --admin-socket, else kvd-admin.sock in the directory
 * of the client socket (as kvd places it), the client socket being the
 * one kv_connect(3) dials: --socket, $KVD_SOCKET, or its default.
 */
static int admin_default(struct kvb_opts *o)
{
	const char *sock = o->socket, *e = getenv("KVD_SOCKET"), *xdg, *slash;
	char buf[sizeof(o->admin_path)];
	int n, dir;

	if (o->admin_socket) {
		snprintf(o->admin_path, sizeof(o->admin_path), "%s",
			 o->admin_socket);
		return 0;
	}
	if (!sock && e && *e) {
		sock = e;
	} else if (!sock) {
		xdg = getenv("XDG_RUNTIME_DIR");
		if (geteuid() == 0 || !xdg || !*xdg)
			xdg = "/run/kvd";
		snprintf(buf, sizeof(buf), "%s/kvd.sock", xdg);
		sock = buf;
	}
	slash = strrchr(sock, '/');
	dir = slash ? (int)(slash - sock + 1) : 0;
	n = snprintf(o->admin_path, sizeof(o->admin_path), "%.*skvd-admin.sock",
		     dir, sock);
	if (n < 0 || (size_t)n >= sizeof(o->admin_path)) {
		fprintf(stderr, "kvbench: the admin socket beside %s has too long a path; give --admin-socket\n",
			sock);
		return -1;
	}
	return 0;
}

/* Model k: id MODEL-mk (model 0: MODEL), k + 1 times the layers. */
static int models_setup(struct kvb_opts *o)
{
	unsigned n = o->models;

	if (o->procs < n) {
		fprintf(stderr, "kvbench: --models %u needs at least as many --procs (%u)\n",
			n, o->procs);
		return -1;
	}
	if (n == 1 && o->phase_given) {
		fprintf(stderr, "kvbench: --phase-requests needs --models 2 or more\n");
		return -1;
	}
	if (n > 1 && o->compare) {
		fprintf(stderr, "kvbench: --compare-allocators applies to one model, not to --models %u\n",
			n);
		return -1;
	}
	if ((uint64_t)o->geom.layers * n > 1024) {
		fprintf(stderr, "kvbench: --models %u gives model %u %llu layers; kvd allows 1024 (use fewer --layers)\n",
			n, n - 1, (unsigned long long)o->geom.layers * n);
		return -1;
	}
	for (unsigned m = 0; m < n; m++) {
		struct kvb_model *k = &o->mdl[m];
		int len;

		if (m)
			len = snprintf(k->id, sizeof(k->id), "%s-m%u",
				       o->model, m);
		else
			len = snprintf(k->id, sizeof(k->id), "%s", o->model);
		if (len < 0 || (size_t)len >= sizeof(k->id)) {
			fprintf(stderr, "kvbench: --model '%s': model id '%s-m%u' would be over %d bytes\n",
				o->model, o->model, m, KV_MODEL_ID_MAX - 1);
			return -1;
		}
		k->geom = o->geom;
		k->geom.layers = o->geom.layers * (m + 1);
		k->procs = o->procs / n + (m < o->procs % n);
	}
	if (n > 1 && !o->sample_given)
		o->sample_ms = KVB_DEFAULT_SAMPLE_MS;
	return o->sample_ms ? admin_default(o) : 0;
}

/* Checks between options, and what follows from them. */
static int opts_finish(struct kvb_opts *o)
{
	uint64_t data;

	if (check_replay(o) || quant_setup(o))
		return -1;
	/* --perf-stat asks kvd for its pid (KV_ADMIN_STATUS) */
	if (o->perf_stat && !o->private_pool && admin_default(o))
		return -1;
	/* Alloc mode: one model, the one of --model and the geometry. */
	snprintf(o->mdl[0].id, sizeof(o->mdl[0].id), "%s", o->model);
	o->mdl[0].geom = o->geom;
	o->mdl[0].procs = o->procs;
	if (o->mode == KVB_MODE_REPLAY) {
		if (!o->chunk_given)
			o->decode_chunk = o->geom.block_tokens;
		o->live_max = o->live;
		return models_setup(o);	/* the rest once the trace is read */
	}
	if (o->min_tokens > o->max_tokens) {
		fprintf(stderr, "kvbench: --min-tokens %u is above --max-tokens %u\n",
			o->min_tokens, o->max_tokens);
		return -1;
	}
	o->max_req_blocks = (o->max_tokens + o->geom.block_tokens - 1) /
			    o->geom.block_tokens;
	/* A batch's id arrays all live in the ring's data area at once. */
	data = (uint64_t)o->batch * o->max_req_blocks * sizeof(kv_block_t);
	if (data > KV_MAX_DATA_BYTES) {
		fprintf(stderr, "kvbench: --batch %u of requests up to %u blocks (--max-tokens %u) needs %llu bytes of ring data area; kvd allows %u\n",
			o->batch, o->max_req_blocks, o->max_tokens,
			(unsigned long long)data, KV_MAX_DATA_BYTES);
		return -1;
	}
	data = (data + 4095) & ~4095ULL;
	o->data_bytes = data > (256U << 10) ? (unsigned)data : 0;
	o->sq_entries = 0;
	while (o->batch > 256 && o->sq_entries < o->batch)
		o->sq_entries = o->sq_entries ? o->sq_entries * 2 : 512;
	o->live_max = o->live;
	if (o->batch > 1)
		o->live_max = (o->live + o->batch - 1) / o->batch * o->batch;
	return 0;
}

/* Shell-quote argv into one line, so the report shows how to rerun. */
static char *join_argv(int argc, char **argv)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyz"
				   "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789_./=:,+@%-";
	size_t len = 1;
	char *s, *p;

	for (int i = 0; i < argc; i++)
		len += 4 * strlen(argv[i]) + 3;
	s = p = malloc(len);
	if (!s)
		return NULL;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		bool q = !*a || strspn(a, safe) != strlen(a);

		if (i)
			*p++ = ' ';
		if (q)
			*p++ = '\'';
		for (; *a; a++) {
			if (*a == '\'') {
				memcpy(p, "'\\''", 4);
				p += 4;
			} else {
				*p++ = *a;
			}
		}
		if (q)
			*p++ = '\'';
	}
	*p = 0;
	return s;
}

static void bad_option(int opt, const char *arg)
{
	if (opt == ':')
		fprintf(stderr, "kvbench: option '%s' needs a value\n", arg);
	else if (optopt && arg[0] == '-' && arg[1] != '-')
		fprintf(stderr, "kvbench: unknown option '-%c'\n", optopt);
	else if (optopt)
		fprintf(stderr, "kvbench: option '%.*s' takes no value\n",
			(int)strcspn(arg, "="), arg);
	else
		fprintf(stderr, "kvbench: unknown option '%s'\n", arg);
}

/* Where an option of groups @group goes: their homes, joined. */
static void og_homes(char *buf, size_t len, unsigned group)
{
	size_t n = 0;

	buf[0] = 0;
	for (unsigned g = 0; g < KVB_NR_OG && n < len; g++)
		if (group & (1U << g))
			n += (size_t)snprintf(buf + n, len - n, "%s%s",
					      n ? ", or " : "", og_home[g]);
}

/*
 * An option the mode does not take is a mistake: say where it goes.
 * @seen: per optdefs entry, whether it was given. An option of several
 * groups goes with a mode that takes any of them.
 */
static int check_groups(const struct kvb_opts *o,
			const struct kvb_mode_def *md, const bool *seen)
{
	const char *hint = "";
	char home[256];

	for (size_t i = 0; i < NR_OPTDEFS; i++) {
		const struct kvb_optdef *d = &optdefs[i];

		if (!seen[i] || !d->group || (md->opts & d->group))
			continue;
		if (d->val == 'n' && o->mode == KVB_MODE_REPLAY)
			hint = " (use --limit)";
		else if (d->val == 'n' && (md->opts & KVB_OG_ITERS))
			hint = " (round trips: --iterations N)";
		og_homes(home, sizeof(home), d->group);
		fprintf(stderr, "kvbench: --%s goes with %s, not with %s%s\n",
			d->name, home, md->name, hint);
		return -1;
	}
	return 0;
}

/* --socket, --private-kvd and --kvd of the engine modes. */
static int private_kvd_check(const struct kvb_opts *o)
{
	if (o->socket && o->private_pool) {
		fprintf(stderr, "kvbench: --socket names a kvd; --private-kvd starts one\n");
		return -1;
	}
	if (o->kvd_bin && !o->private_pool) {
		fprintf(stderr, "kvbench: --kvd goes with --private-kvd\n");
		return -1;
	}
	return 0;
}

/* The engine modes' checks between options; then what follows. */
static int fleet_finish(struct kvb_opts *o)
{
	if (private_kvd_check(o))
		return -1;
	return opts_finish(o);
}

/* One policy of --policy, checked against --max-context. */
static int policy_add(struct kvb_opts *o, const char *s)
{
	const char *why = "";
	struct kv_ctx_policy *p;

	if (o->nr_policies == KVB_MAX_POLICIES) {
		fprintf(stderr, "kvbench: --policy: at most %u policies in one run\n",
			KVB_MAX_POLICIES);
		return -1;
	}
	p = &o->policy[o->nr_policies];
	if (kv_ctx_policy_parse(s, p)) {
		fprintf(stderr, "kvbench: --policy '%s': not a policy (none, truncate [stop|drop], window W [bos-extra], sinks S W [bos|bos-extra], or all)\n",
			s);
		return -1;
	}
	if (kv_ctx_policy_check(p, o->max_context, &why)) {
		fprintf(stderr, "kvbench: --policy '%s': %s (--max-context %u)\n",
			s, why, o->max_context);
		return -1;
	}
	o->nr_policies++;
	return 0;
}

/*
 * "all": the four kinds, in the order of the comparison: none, truncate
 * (stop), window W and sinks 4 W (StreamingLLM's four sinks), W a
 * quarter of max_context; without one W is 1024 and truncate, which
 * needs one, is left out.
 */
static int policy_all(struct kvb_opts *o)
{
	unsigned w = o->max_context ? o->max_context / 4 : 1024;
	char buf[2][48];

	snprintf(buf[0], sizeof(buf[0]), "window %u", w ? w : 1);
	snprintf(buf[1], sizeof(buf[1]), "sinks 4 %u", w ? w : 1);
	if (policy_add(o, "none") ||
	    (o->max_context && policy_add(o, "truncate")) ||
	    policy_add(o, buf[0]) || policy_add(o, buf[1]))
		return -1;
	return 0;
}

/* Each --policy: "all", or policies separated by commas. */
static int policies_setup(struct kvb_opts *o)
{
	char buf[256], *save = NULL, *w;

	for (unsigned i = 0; i < o->nr_policy_args; i++) {
		if (strlen(o->policy_arg[i]) >= sizeof(buf)) {
			fprintf(stderr, "kvbench: --policy: '%s' is too long\n",
				o->policy_arg[i]);
			return -1;
		}
		strcpy(buf, o->policy_arg[i]);
		for (w = strtok_r(buf, ",", &save); w;
		     w = strtok_r(NULL, ",", &save)) {
			w += strspn(w, " \t");
			if (strcmp(w, "all") ? policy_add(o, w) : policy_all(o))
				return -1;
		}
	}
	if (!o->nr_policies) {
		fprintf(stderr, "kvbench: --policy: no policy given\n");
		return -1;
	}
	return 0;
}

/*
 * The defaults of the options not given, --quick's or the long run's.
 * Only --policy sets max_context: the other modes connect without one.
 */
static void longgen_defaults(struct kvb_opts *o)
{
	unsigned given = o->lg_given;

	if (o->quick && !(given & KVB_LG_GIVEN_PROCS))
		o->procs = 2;
	if (!(given & KVB_LG_GIVEN_CONTEXT))
		o->max_context = o->quick ? 512 : KVB_LG_MAX_CONTEXT;
	if (!(given & KVB_LG_GIVEN_GEN))
		o->gen_tokens = o->quick ? 4096 : KVB_LG_GEN_TOKENS;
	if (!(given & KVB_LG_GIVEN_PROMPT))
		o->prompt_tokens = o->quick ? 64 : KVB_LG_PROMPT;
}

/* --policy's checks between options; then what follows. */
static int longgen_finish(struct kvb_opts *o)
{
	if (private_kvd_check(o) || quant_setup(o))
		return -1;
	longgen_defaults(o);
	if (policies_setup(o))
		return -1;
	for (unsigned i = 0; o->max_context && i < o->nr_policies; i++) {
		const struct kv_ctx_policy *p = &o->policy[i];

		if (o->prompt_tokens <= o->max_context ||
		    p->kind == KV_CTX_WINDOW || p->kind == KV_CTX_SINKS ||
		    (p->flags & KV_CTX_DROP_OLDEST))
			continue;
		fprintf(stderr, "kvbench: --prompt-tokens %u is above --max-context %u (none and truncate stop refuse such a prompt)\n",
			o->prompt_tokens, o->max_context);
		return -1;
	}
	if (!o->sample_given)
		o->sample_ms = KVB_LG_SAMPLE_MS;
	snprintf(o->mdl[0].id, sizeof(o->mdl[0].id), "%s", o->model);
	o->mdl[0].geom = o->geom;
	o->mdl[0].procs = o->procs;
	return 0;
}

static int bench_finish(const struct kvb_opts *o)
{
	if (o->socket && o->kvd_bin) {
		fprintf(stderr, "kvbench: --socket uses a running kvd; --kvd starts one\n");
		return -1;
	}
	return 0;
}

/* The checks between the options of the mode, and what follows. */
static int mode_finish(struct kvb_opts *o, const struct kvb_mode_def *modes)
{
	if (o->mode == KVB_MODE_LONGGEN)
		return longgen_finish(o);
	if (modes[o->mode].opts & KVB_OG_FLEET)
		return fleet_finish(o);
	return bench_finish(o);
}

/* getopt_long's table and short options, from optdefs. */
static void getopt_tables(struct option *lo, char *shorts)
{
	char *p = shorts;

	*p++ = ':';	/* a missing value is ':', not '?' */
	for (size_t i = 0; i < NR_OPTDEFS; i++) {
		const struct kvb_optdef *d = &optdefs[i];

		lo[i] = (struct option){ d->name, d->has_arg, NULL, d->val };
		if (d->val >= 256)
			continue;
		*p++ = (char)d->val;
		if (d->has_arg == required_argument)
			*p++ = ':';
	}
	*p = 0;
	lo[NR_OPTDEFS] = (struct option){ 0 };
}

int kvb_opts_parse(struct kvb_opts *o, int argc, char **argv,
		   const struct kvb_mode_def *modes)
{
	bool seen[NR_OPTDEFS] = { 0 };
	struct option lo[NR_OPTDEFS + 1];
	char shorts[2 * NR_OPTDEFS + 2];
	const struct kvb_optdef *d;
	int opt;

	opts_default(o);
	/* Before getopt_long, which may permute argv. */
	o->cmdline = join_argv(argc, argv);
	if (!o->cmdline) {
		fprintf(stderr, "kvbench: out of memory\n");
		return -1;
	}
	getopt_tables(lo, shorts);
	opterr = 0;	/* our own messages, naming the option as given */
	while ((opt = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		if (opt == 'h') {
			kvb_usage(stdout);
			exit(0);
		}
		if (opt == 'V') {
			printf("kvbench %s (ABI %u.%u)\n", KV_VERSION,
			       KV_ABI_MAJOR, KV_ABI_MINOR);
			exit(0);
		}
		if (opt == '?' || opt == ':') {
			bad_option(opt, argv[optind - 1]);
			goto err_usage;
		}
		d = optdef(opt);
		if (d)
			seen[d - optdefs] = true;
		if (parse_one(o, opt, optarg))
			goto err_usage;
	}
	if (optind < argc) {
		fprintf(stderr, "kvbench: unexpected argument '%s'\n",
			argv[optind]);
		goto err_usage;
	}
	if (check_groups(o, &modes[o->mode], seen) || mode_finish(o, modes))
		goto err_usage;
	return 0;

err_usage:
	fprintf(stderr, "Try 'kvbench --help'.\n");
	return -1;
}
