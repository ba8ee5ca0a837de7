/* SPDX-License-Identifier: MIT */
/*
 * kvbench's options: what one invocation asks for, in one struct that
 * the one parser (opts.c) fills from one option table, and the shape of
 * the mode table (main.c) it picks the mode from. Each option belongs to
 * one group or more; a mode takes the options of the groups its table
 * entry names and refuses the others, so an option that does nothing in
 * a mode is a mistake, not a no-op. Nothing here includes another part
 * of kvbench.
 */
#ifndef KVB_OPTS_H
#define KVB_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

#include <kv/kv.h>

#define KVB_MAX_PROCS		64
#define KVB_MAX_REQUESTS	1000000U	/* samples: 16 bytes each */
#define KVB_MAX_TOKENS		(1U << 20)
#define KVB_MAX_BATCH		1024U
#define KVB_MAX_LIVE		4096U
#define KVB_DEFAULT_TRACE_BLOCK	512
#define KVB_MAX_MODELS		8
#define KVB_DEFAULT_SAMPLE_MS	200
#define KVB_DEFAULT_ITERS	20000U
#define KVB_MAX_ITERS		10000000U
#define KVB_DEFAULT_RUNS	5U
#define KVB_MAX_RUNS		99U
#define KVB_PRIVATE_POOL	"256M"	/* --private-kvd without a size */
#define KVB_PATH_MAX		4096	/* --disk-tier-path, with room to spare */
#define KVB_MAX_POLICIES	8	/* --policy: runs of one invocation */
#define KVB_MAX_SEQS		64	/* --seqs: per engine process */
#define KVB_LG_MAX_CONTEXT	4096U	/* --policy defaults */
#define KVB_LG_GEN_TOKENS	65536U
#define KVB_LG_PROMPT		256U
#define KVB_LG_SEQS		2U
#define KVB_LG_SAMPLE_MS	10U

/* One per entry of the mode table; the first is the default. */
enum kvb_mode {
	KVB_MODE_ALLOC,		/* alloc/release with patterns */
	KVB_MODE_REPLAY,	/* --trace or --synthetic */
	KVB_MODE_WORKLOAD,	/* --workload FILE */
	KVB_MODE_FLOOR,		/* --floor */
	KVB_MODE_HASH,		/* --hash-bench */
	KVB_MODE_REDIS,		/* --redis */
	KVB_MODE_SUMMARY,	/* --bench-summary DIR */
	KVB_MODE_LONGGEN,	/* --policy: long generation */
	KVB_NR_MODES,
};

/* Option groups; struct kvb_mode_def.opts says which a mode takes. */
enum {
	KVB_OG_JSON	= 1U << 0,	/* --json */
	KVB_OG_KVD	= 1U << 1,	/* --socket, --kvd */
	KVB_OG_ADMIN	= 1U << 2,	/* --admin-socket */
	KVB_OG_FLEET	= 1U << 3,	/* engine processes, geometry */
	KVB_OG_LOAD	= 1U << 4,	/* alloc/release requests */
	KVB_OG_REPLAY	= 1U << 5,	/* replay of a request stream */
	KVB_OG_RUNS	= 1U << 6,	/* --runs */
	KVB_OG_ITERS	= 1U << 7,	/* --iterations */
	KVB_OG_LONGGEN	= 1U << 8,	/* long generation under --policy */
	KVB_NR_OG	= 9,
};

struct kvb_opts;

/* One mode: its name in messages, what it takes, what runs it. */
struct kvb_mode_def {
	const char	*name;
	unsigned	opts;		/* KVB_OG_* it takes */
	int		(*run)(struct kvb_opts *o);	/* exit status */
};

/* One model of a --models run: a namespace of its own. */
struct kvb_model {
	char		id[KV_MODEL_ID_MAX];
	struct kv_geometry geom;
	unsigned	procs;		/* processes i with i % models == it */
};

struct kvb_trace;
struct kvb_shared;
struct kvb_tier_base;

struct kvb_opts {
	enum kvb_mode	mode;
	const char	*mode_opt;	/* the option that chose it, or NULL */
	const char	*mode_arg;	/* of --workload, --bench-summary */
	const char	*socket;
	const char	*model;
	const char	*json_path;
	const char	*dtype_name;
	bool		quant_given;
	bool		no_verify;	/* books only: no block bytes touched */
	bool		perf_stat;	/* kvd's counts from perf stat */
	unsigned	procs;
	unsigned	requests;
	unsigned	min_tokens;
	unsigned	max_tokens;
	unsigned	batch;
	unsigned	live;		/* as given */
	unsigned	live_max;	/* used: whole batches in batch mode */
	unsigned	sq_entries;
	unsigned	data_bytes;
	uint32_t	max_req_blocks;
	uint64_t	seed;
	struct kv_geometry geom;
	bool		quiet;
	char		*cmdline;
	/* replay */
	const char	*trace_path;
	bool		synthetic;
	unsigned	trace_block;
	unsigned	limit;
	bool		timestamps;
	double		ts_scale;
	bool		compare;
	unsigned	max_model_len;
	unsigned	decode_chunk;	/* tokens per append; 0: all at once */
	bool		chunk_given;
	uint64_t	salt;
	bool		salt_given;
	/* several models, time series */
	unsigned	models;		/* --models, 1..KVB_MAX_MODELS */
	unsigned	phase_requests;	/* requests per phase */
	bool		phase_given;
	unsigned	phases;		/* in all models */
	unsigned	sample_ms;	/* 0: no time series */
	bool		sample_given;
	const char	*admin_socket;	/* as given */
	char		admin_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct kvb_model mdl[KVB_MAX_MODELS];
	const struct kvb_trace *tr;
	struct kvb_shared *sh;
	const char	*private_pool;	/* --private-kvd: its pool size */
	const char	*kvd_bin;	/* --kvd */
	const char	*host_tier;	/* --host-tier-size: of that kvd */
	const char	*disk_tier;	/* --disk-tier-size: of that kvd */
	const char	*disk_tier_path;	/* --disk-tier-path, or NULL */
	bool		no_fio;		/* --no-fio: no fio beside the pass */
	bool		compare_tier;	/* --compare-tier: without, then with */
	struct kvb_tier_base *tier_base;	/* --compare-tier's first run */
	/* benchmarks */
	unsigned	runs;		/* --runs (workload) */
	unsigned	iters;		/* --iterations (floor, redis) */
	/* long generation: --policy, each policy one run */
	const char	*policy_arg[KVB_MAX_POLICIES];	/* as given */
	unsigned	nr_policy_args;
	struct kv_ctx_policy policy[KVB_MAX_POLICIES];
	unsigned	nr_policies;
	unsigned	max_context;	/* kv_connect_params.max_context (0
					 * but with --policy) */
	unsigned	gen_tokens;	/* appended per sequence, at most */
	unsigned	prompt_tokens;	/* of each sequence's prompt */
	unsigned	seqs;		/* per engine process */
	bool		quick;		/* small defaults, for a test */
	bool		verbose;	/* a line per sequence */
	unsigned	lg_given;	/* KVB_LG_GIVEN_*: options given */
};

/* Long-generation options given (kvb_opts.lg_given), over --quick's. */
enum {
	KVB_LG_GIVEN_PROCS	= 1U << 0,
	KVB_LG_GIVEN_CONTEXT	= 1U << 1,
	KVB_LG_GIVEN_GEN	= 1U << 2,
	KVB_LG_GIVEN_PROMPT	= 1U << 3,
};

/*
 * kvb_opts_parse - fill @o from argv, the mode one of @modes
 * (KVB_NR_MODES entries). Prints the help and exits on --help. Returns
 * 0, or -1 after saying what is wrong (exit status 2).
 */
int kvb_opts_parse(struct kvb_opts *o, int argc, char **argv,
		   const struct kvb_mode_def *modes);
const char *kvb_quant_name(uint32_t q);
/* --help (usage.c). */
void kvb_usage(FILE *f);

#endif /* KVB_OPTS_H */
