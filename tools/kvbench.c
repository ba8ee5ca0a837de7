// SPDX-License-Identifier: MIT
/*
 * kvbench: several engine processes load kvd with synthetic requests.
 *
 * Each process connects and, for every request, allocates
 * ceil(tokens / block_tokens) blocks (tokens uniform in [--min-tokens,
 * --max-tokens]), fills every byte of them with a pattern derived from
 * (block id, generation), keeps --live requests at once, and verifies the
 * oldest just before it releases it. A generation is unique per (process,
 * request), so a block that kvd hands to two holders, or that anyone else
 * writes, fails the check. Only the ALLOC and RELEASE round trips are
 * timed; the pattern work is not.
 *
 * Counts and latency samples travel to the parent through one pipe per
 * process; the parent reports ops/s, latency percentiles and the pool's
 * peak use, as a table and optionally as JSON (tools/emit.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kv/kv.h>

#include "emit.h"

#define NSEC_PER_SEC		1000000000ULL
#define KVB_MAX_PROCS		64
#define KVB_MAX_REQUESTS	1000000U	/* samples: 16 bytes each */
#define KVB_MAX_TOKENS		(1U << 20)
#define KVB_MAX_BATCH		1024U
#define KVB_MAX_LIVE		4096U
#define KVB_MAX_MSGS		16	/* mismatch lines per process */
#define KVB_ENOSPC_GIVEUP_NS	(30 * NSEC_PER_SEC)
#define KVB_RESULT_MAGIC	0x5242564bU	/* "KVBR" */
/* Odd, so the words of one block never repeat. */
#define KVB_PATTERN_STEP	0x9e3779b97f4a7c15ULL

struct opts {
	const char	*socket;
	const char	*model;
	const char	*json_path;
	const char	*dtype_name;
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
};

/* What one process sends its parent, followed by its samples. */
struct kvb_result {
	uint32_t	magic;
	int32_t		status;		/* 0: ran to the end */
	uint64_t	requests;
	uint64_t	alloc_ops;	/* round trips, -ENOSPC ones too */
	uint64_t	release_ops;
	uint64_t	blocks;		/* blocks allocated */
	uint64_t	enospc;		/* ALLOCs answered -ENOSPC */
	uint64_t	forced;		/* released early for room */
	uint64_t	waits;		/* -ENOSPC, nothing of ours to free */
	uint64_t	bad_blocks;	/* pattern did not verify */
	uint64_t	bad_words;
	uint64_t	bytes_checked;
	uint64_t	t_start_ns;
	uint64_t	t_end_ns;
	uint64_t	alloc_sum_ns, alloc_max_ns;
	uint64_t	release_sum_ns, release_max_ns;
	uint32_t	nr_alloc;	/* samples that follow */
	uint32_t	nr_release;
	uint32_t	max_live_blocks;
	uint32_t	resv;
};

/* Latency samples of one op, bounded: reservoir sampling past cap. */
struct samples {
	uint64_t	*v;
	uint32_t	nr, cap;
	uint64_t	seen;
};

/* One synthetic request: its blocks and its pattern's generation. */
struct req {
	uint64_t	seq;
	uint64_t	gen;
	uint32_t	nblocks;
	uint32_t	cap;
	kv_block_t	*ids;
};

struct worker {
	const struct opts *o;
	struct kv_client *c;
	unsigned	idx;
	uint64_t	rng;		/* request lengths */
	uint64_t	res_rng;	/* reservoir slots */
	uint64_t	gen_base;
	size_t		words;		/* 64-bit words per block */
	struct req	*live;		/* ring of live_max, oldest first */
	uint32_t	head, nlive;
	uint32_t	live_blocks;
	struct req	*pend;		/* batch requests awaiting ALLOC */
	int		*res;		/* a result per pending request */
	uint64_t	next_seq;
	unsigned	msgs;
	struct samples	alloc, release;
	struct kvb_result r;
};

struct child {
	pid_t		pid;
	int		fd;
	bool		ready;
	bool		started;	/* told to go */
	bool		got;		/* results arrived */
	int		wstatus;
	struct kvb_result r;
	uint64_t	*alloc, *release;	/* sorted samples */
};

struct agg {
	struct kvb_result sum;
	uint64_t	t_start, t_end;
	uint64_t	*alloc, *release;	/* sorted, all processes */
	uint64_t	nr_alloc, nr_release;
	struct kv_pool_info info;
	struct kv_stats	before, after;
	bool		have_after;
	unsigned	failed;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return splitmix64(*s);
}

/* ---- options ---- */

enum {
	OPT_MIN_TOKENS = 256,
	OPT_MAX_TOKENS,
	OPT_SEED,
	OPT_LAYERS,
	OPT_KV_HEADS,
	OPT_HEAD_DIM,
	OPT_BLOCK_TOKENS,
	OPT_DTYPE,
	OPT_MODEL,
	OPT_JSON,
};

static const struct option long_opts[] = {
	{ "socket",	  required_argument, NULL, 's' },
	{ "procs",	  required_argument, NULL, 'p' },
	{ "requests",	  required_argument, NULL, 'n' },
	{ "min-tokens",	  required_argument, NULL, OPT_MIN_TOKENS },
	{ "max-tokens",	  required_argument, NULL, OPT_MAX_TOKENS },
	{ "batch",	  required_argument, NULL, 'b' },
	{ "live",	  required_argument, NULL, 'l' },
	{ "seed",	  required_argument, NULL, OPT_SEED },
	{ "layers",	  required_argument, NULL, OPT_LAYERS },
	{ "kv-heads",	  required_argument, NULL, OPT_KV_HEADS },
	{ "head-dim",	  required_argument, NULL, OPT_HEAD_DIM },
	{ "block-tokens", required_argument, NULL, OPT_BLOCK_TOKENS },
	{ "dtype",	  required_argument, NULL, OPT_DTYPE },
	{ "model",	  required_argument, NULL, OPT_MODEL },
	{ "json",	  required_argument, NULL, OPT_JSON },
	{ "quiet",	  no_argument,	     NULL, 'q' },
	{ "help",	  no_argument,	     NULL, 'h' },
	{ 0 }
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvbench [options]\n"
"Start N engine processes that allocate, write, verify and release kvd\n"
"blocks for synthetic requests; report ops/s, latency and pool peak use.\n"
"  -s, --socket PATH      kvd socket (default $KVD_SOCKET, else\n"
"                         /run/kvd/kvd.sock as root, $XDG_RUNTIME_DIR/kvd.sock)\n"
"  -p, --procs N          engine processes, 1..%u (default 4)\n"
"  -n, --requests N       requests per process, 1..%u (default 2000)\n"
"      --min-tokens N     shortest request (default 64)\n"
"      --max-tokens N     longest request (default 2048); lengths are\n"
"                         uniform in [min, max], blocks = ceil(tokens /\n"
"                         block_tokens)\n"
"  -b, --batch N          1: one synchronous kv_alloc/kv_release per\n"
"                         request (default); 2..%u: N ALLOC SQEs per\n"
"                         submit, then N RELEASE SQEs per submit\n"
"  -l, --live N           requests each process holds at once, 1..%u\n"
"                         (default 8; with --batch, rounded up to whole\n"
"                         batches)\n"
"      --seed N           request lengths and patterns (default 1)\n"
"      --layers N         model geometry (default 4)\n"
"      --kv-heads N       (default 2)\n"
"      --head-dim N       (default 64)\n"
"      --block-tokens N   (default 16)\n"
"      --dtype T          fp16, bf16, fp32, fp8 or int8 (default fp16)\n"
"      --model NAME       model id (default kvbench)\n"
"      --json FILE        also write the report as JSON to FILE\n"
"  -q, --quiet            no report on stdout (errors still on stderr)\n"
"  -h, --help\n"
"Exit status: 0 ok, 1 a process failed or a pattern did not verify,\n"
"2 usage error.\n",
		KVB_MAX_PROCS, KVB_MAX_REQUESTS, KVB_MAX_BATCH, KVB_MAX_LIVE);
}

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

static void opts_default(struct opts *o)
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
}

/* One option; returns 0, or -1 after saying what is wrong. */
static int parse_one(struct opts *o, int opt, const char *arg)
{
	switch (opt) {
	case 's':
		o->socket = arg;
		if (!*arg) {
			fprintf(stderr, "kvbench: --socket: empty path\n");
			return -1;
		}
		return 0;
	case 'p':
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
	case 'q':
		o->quiet = true;
		return 0;
	}
	return -1;
}

/* Checks between options, and what follows from them. */
static int opts_finish(struct opts *o)
{
	uint64_t data;

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

static int parse_args(struct opts *o, int argc, char **argv)
{
	int opt;

	opts_default(o);
	/* Before getopt_long, which may permute argv. */
	o->cmdline = join_argv(argc, argv);
	if (!o->cmdline) {
		fprintf(stderr, "kvbench: out of memory\n");
		return -1;
	}
	opterr = 0;	/* our own messages, naming the option as given */
	while ((opt = getopt_long(argc, argv, ":s:p:n:b:l:qh", long_opts,
				  NULL)) != -1) {
		if (opt == 'h') {
			usage(stdout);
			exit(0);
		}
		if (opt == '?' || opt == ':') {
			bad_option(opt, argv[optind - 1]);
			goto err_usage;
		}
		if (parse_one(o, opt, optarg))
			goto err_usage;
	}
	if (optind < argc) {
		fprintf(stderr, "kvbench: unexpected argument '%s'\n",
			argv[optind]);
		goto err_usage;
	}
	if (opts_finish(o))
		goto err_usage;
	return 0;

err_usage:
	fprintf(stderr, "Try 'kvbench --help'.\n");
	return -1;
}

/* ---- kvd ---- */

static int connect_kvd(const struct opts *o, struct kv_client **c,
		       const char *who)
{
	struct kv_connect_params p = {
		.socket_path = o->socket,
		.model_id = o->model,
		.geom = o->geom,
		.sq_entries = o->sq_entries,
		.data_bytes = o->data_bytes,
	};
	char err[256] = "";
	int ret;

	p.errbuf = err;
	p.errbuf_len = sizeof(err);
	ret = kv_connect(&p, c);
	if (ret)
		fprintf(stderr, "kvbench: %s: %s%s%s\n", who, err,
			err[0] ? ": " : "", strerror(-ret));
	return ret;
}

/* ---- samples ---- */

static int samples_init(struct samples *s, uint32_t cap)
{
	s->v = malloc((size_t)cap * sizeof(*s->v));
	s->cap = cap;
	s->nr = 0;
	s->seen = 0;
	return s->v ? 0 : -ENOMEM;
}

static void sample_add(struct worker *w, struct samples *s, uint64_t ns,
		       uint64_t *sum, uint64_t *max)
{
	uint64_t j;

	*sum += ns;
	if (ns > *max)
		*max = ns;
	if (s->nr < s->cap) {
		s->v[s->nr++] = ns;
		s->seen++;
		return;
	}
	/* Reservoir: each of the seen samples stays with p = cap / seen. */
	j = rng_next(&w->res_rng) % ++s->seen;
	if (j < s->cap)
		s->v[j] = ns;
}

static void record(struct worker *w, bool alloc, uint64_t ns, unsigned nr)
{
	for (unsigned i = 0; i < nr; i++) {
		if (alloc)
			sample_add(w, &w->alloc, ns, &w->r.alloc_sum_ns,
				   &w->r.alloc_max_ns);
		else
			sample_add(w, &w->release, ns, &w->r.release_sum_ns,
				   &w->r.release_max_ns);
	}
	if (alloc)
		w->r.alloc_ops += nr;
	else
		w->r.release_ops += nr;
}

/* ---- pattern ---- */

static uint64_t pattern_base(kv_block_t id, uint64_t gen)
{
	return splitmix64(gen ^ splitmix64(id));
}

static int pattern_fill(struct worker *w, const struct req *q)
{
	for (uint32_t b = 0; b < q->nblocks; b++) {
		uint64_t *p = kv_block_ptr(w->c, q->ids[b]);
		uint64_t v = pattern_base(q->ids[b], q->gen);

		if (!p) {
			fprintf(stderr, "kvbench: proc %u: kvd gave block id %u, outside the pool\n",
				w->idx, q->ids[b]);
			return -1;
		}
		for (size_t i = 0; i < w->words; i++, v += KVB_PATTERN_STEP)
			p[i] = v;
	}
	return 0;
}

static void mismatch(struct worker *w, const struct req *q, kv_block_t id,
		     size_t first, uint64_t want, uint64_t got, size_t bad)
{
	if (w->msgs++ >= KVB_MAX_MSGS)
		return;
	fprintf(stderr, "kvbench: proc %u: pattern mismatch in block %u (request %llu, generation %#llx): word %zu expected %#018llx, found %#018llx; %zu of %zu words differ\n",
		w->idx, id, (unsigned long long)q->seq,
		(unsigned long long)q->gen, first, (unsigned long long)want,
		(unsigned long long)got, bad, w->words);
	if (w->msgs == KVB_MAX_MSGS)
		fprintf(stderr, "kvbench: proc %u: further mismatches counted, not shown\n",
			w->idx);
}

static void verify_block(struct worker *w, const struct req *q, kv_block_t id)
{
	const uint64_t *p = kv_block_ptr(w->c, id);
	uint64_t base = pattern_base(id, q->gen), v = base, want = 0, got = 0;
	size_t bad = 0, first = 0;

	for (size_t i = 0; i < w->words; i++, v += KVB_PATTERN_STEP) {
		if (p[i] == v)
			continue;
		if (!bad++) {
			first = i;
			want = v;
			got = p[i];
		}
	}
	w->r.bytes_checked += w->words * sizeof(uint64_t);
	if (!bad)
		return;
	w->r.bad_blocks++;
	w->r.bad_words += bad;
	mismatch(w, q, id, first, want, got, bad);
}

static void verify_req(struct worker *w, const struct req *q)
{
	for (uint32_t b = 0; b < q->nblocks; b++)
		verify_block(w, q, q->ids[b]);
}

/* ---- requests ---- */

static struct req *live_at(struct worker *w, uint32_t i)
{
	return &w->live[(w->head + i) % w->o->live_max];
}

static int req_new(struct worker *w, struct req *q)
{
	const struct opts *o = w->o;
	uint32_t span = o->max_tokens - o->min_tokens + 1;
	uint32_t tokens = o->min_tokens + (uint32_t)(rng_next(&w->rng) % span);

	q->nblocks = (tokens + o->geom.block_tokens - 1) / o->geom.block_tokens;
	q->seq = w->next_seq++;
	q->gen = w->gen_base ^ ((uint64_t)(w->idx + 1) << 40 | q->seq);
	if (q->nblocks > q->cap) {
		kv_block_t *ids = realloc(q->ids, q->nblocks * sizeof(*ids));

		if (!ids) {
			fprintf(stderr, "kvbench: proc %u: out of memory\n",
				w->idx);
			return -ENOMEM;
		}
		q->ids = ids;
		q->cap = q->nblocks;
	}
	return 0;
}

static void swap_req(struct req *a, struct req *b)
{
	struct req t = *a;

	*a = *b;
	*b = t;
}

/* An allocated, written request joins the live ring (it has room). */
static void live_push(struct worker *w, struct req *q)
{
	swap_req(live_at(w, w->nlive), q);
	w->nlive++;
	w->live_blocks += live_at(w, w->nlive - 1)->nblocks;
	if (w->live_blocks > w->r.max_live_blocks)
		w->r.max_live_blocks = w->live_blocks;
}

static int op_failed(struct worker *w, const char *op, const struct req *q,
		     int res)
{
	fprintf(stderr, "kvbench: proc %u: %s of %u blocks (request %llu): %s\n",
		w->idx, op, q->nblocks, (unsigned long long)q->seq,
		res < 0 ? strerror(-res) : "short count");
	return -1;
}

/* ---- ALLOC and RELEASE round trips ---- */

static int alloc_sync(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];
		uint64_t t0 = now_ns();

		w->res[i] = kv_alloc(w->c, q->nblocks, q->ids);
		record(w, true, now_ns() - t0, 1);
	}
	return 0;
}

static int release_sync(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct req *q = live_at(w, i);
		uint64_t t0 = now_ns();

		w->res[i] = kv_release(w->c, q->ids, q->nblocks);
		record(w, false, now_ns() - t0, 1);
	}
	return 0;
}

/* Reap @n CQEs; results by user_data (the request's index). */
static int reap(struct worker *w, unsigned n)
{
	struct kv_cqe *cqe;
	int ret;

	for (unsigned i = 0; i < n; i++)
		w->res[i] = -EINPROGRESS;
	for (unsigned i = 0; i < n; i++) {
		ret = kv_wait_cqe(w->c, &cqe);
		if (ret) {
			fprintf(stderr, "kvbench: proc %u: waiting for a CQE: %s\n",
				w->idx, strerror(-ret));
			return ret;
		}
		if (cqe->user_data < n)
			w->res[cqe->user_data] = cqe->res;
		kv_cqe_seen(w->c, cqe);
	}
	return 0;
}

/* Prepare one SQE per request; ids at consecutive data offsets. */
static int prep_batch(struct worker *w, struct req *(*get)(struct worker *,
							   unsigned),
		      unsigned n, bool alloc)
{
	uint32_t off = 0;

	for (unsigned i = 0; i < n; i++) {
		struct req *q = get(w, i);
		uint32_t len = q->nblocks * sizeof(kv_block_t);
		struct kv_sqe *sqe = kv_get_sqe(w->c);
		void *d = kv_data_ptr(w->c, off, len);

		if (!sqe || !d) {
			fprintf(stderr, "kvbench: proc %u: no %s for a batch of %u\n",
				w->idx, sqe ? "data area room" : "SQE", n);
			return -ENOSPC;
		}
		if (alloc) {
			kv_prep_alloc(sqe, q->nblocks, off);
		} else {
			memcpy(d, q->ids, len);
			kv_prep_release(sqe, off, q->nblocks);
		}
		kv_sqe_set_data64(sqe, i);
		off += len;
	}
	return 0;
}

/* One submit, reap all; every op's latency is the batch's round trip. */
static int submit_batch(struct worker *w, unsigned n, bool alloc)
{
	uint64_t t0 = now_ns();
	int ret = kv_submit(w->c);

	if (ret != (int)n) {
		fprintf(stderr, "kvbench: proc %u: kv_submit: %s\n", w->idx,
			ret < 0 ? strerror(-ret) : "short submit");
		return -1;
	}
	ret = reap(w, n);
	if (ret)
		return ret;
	record(w, alloc, now_ns() - t0, n);
	return 0;
}

static struct req *pend_at(struct worker *w, unsigned i)
{
	return &w->pend[i];
}

static int alloc_batch(struct worker *w, unsigned n)
{
	uint32_t off = 0;
	int ret;

	ret = prep_batch(w, pend_at, n, true);
	if (!ret)
		ret = submit_batch(w, n, true);
	if (ret)
		return ret;
	/* The ids stay in the data area until the next submit. */
	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];
		uint32_t len = q->nblocks * sizeof(kv_block_t);

		if (w->res[i] > 0)
			memcpy(q->ids, kv_data_ptr(w->c, off, len),
			       (size_t)w->res[i] * sizeof(kv_block_t));
		off += len;
	}
	return 0;
}

static int release_batch(struct worker *w, unsigned n)
{
	int ret = prep_batch(w, live_at, n, false);

	return ret ? ret : submit_batch(w, n, false);
}

/* Verify and release the @n oldest live requests. */
static int release_oldest(struct worker *w, unsigned n, bool forced)
{
	int ret;

	for (unsigned i = 0; i < n; i++)
		verify_req(w, live_at(w, i));
	if (w->o->batch > 1)
		ret = release_batch(w, n);
	else
		ret = release_sync(w, n);
	if (ret)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		struct req *q = live_at(w, i);

		if (w->res[i] != (int)q->nblocks)
			return op_failed(w, "RELEASE", q, w->res[i]);
		w->live_blocks -= q->nblocks;
	}
	w->head = (w->head + n) % w->o->live_max;
	w->nlive -= n;
	if (forced)
		w->r.forced += n;
	return 0;
}

/* -ENOSPC with nothing of our own live: others must release first. */
static int wait_for_room(struct worker *w, uint64_t *stuck_since,
			 unsigned *tries)
{
	struct timespec ts = { 0, 50000L << (*tries < 5 ? *tries : 5) };
	uint64_t t = now_ns();

	if (!*stuck_since)
		*stuck_since = t;
	if (t - *stuck_since > KVB_ENOSPC_GIVEUP_NS) {
		fprintf(stderr, "kvbench: proc %u: pool exhausted for %llu s with nothing of ours to release; is the pool too small for %u processes?\n",
			w->idx, KVB_ENOSPC_GIVEUP_NS / NSEC_PER_SEC,
			w->o->procs);
		return -1;
	}
	w->r.waits++;
	(*tries)++;
	nanosleep(&ts, NULL);
	return 0;
}

/*
 * Move what succeeded to the live ring (writing its pattern) and keep
 * what got -ENOSPC in front of pend. Returns how many still wait.
 */
static int sort_results(struct worker *w, unsigned n)
{
	unsigned left = 0;

	for (unsigned i = 0; i < n; i++) {
		struct req *q = &w->pend[i];

		if (w->res[i] == -ENOSPC) {
			w->r.enospc++;
			swap_req(&w->pend[left++], q);
			continue;
		}
		if (w->res[i] != (int)q->nblocks)
			return op_failed(w, "ALLOC", q, w->res[i]);
		w->r.blocks += q->nblocks;
		w->r.requests++;
		if (pattern_fill(w, q))
			return -1;
		live_push(w, q);
	}
	return (int)left;
}

/* Allocate the @n requests in pend; on -ENOSPC free our oldest, retry. */
static int alloc_group(struct worker *w, unsigned n)
{
	uint64_t stuck_since = 0;
	unsigned tries = 0;
	int ret;

	while (n) {
		if (w->o->batch > 1)
			ret = alloc_batch(w, n);
		else
			ret = alloc_sync(w, n);
		if (!ret)
			ret = sort_results(w, n);
		if (ret <= 0)
			return ret;
		n = (unsigned)ret;
		if (w->nlive)
			ret = release_oldest(w, n < w->nlive ? n : w->nlive,
					     true);
		else
			ret = wait_for_room(w, &stuck_since, &tries);
		if (ret)
			return ret;
	}
	return 0;
}

static int worker_run(struct worker *w)
{
	const struct opts *o = w->o;
	unsigned done = 0, k;
	int ret;

	while (done < o->requests) {
		k = o->requests - done < o->batch ? o->requests - done :
						    o->batch;
		/* Room in the live window: release the oldest first. */
		if (w->nlive + k > o->live_max) {
			ret = release_oldest(w, w->nlive + k - o->live_max,
					     false);
			if (ret)
				return ret;
		}
		for (unsigned i = 0; i < k; i++)
			if (req_new(w, &w->pend[i]))
				return -1;
		ret = alloc_group(w, k);
		if (ret)
			return ret;
		done += k;
	}
	while (w->nlive) {
		k = w->nlive < o->batch ? w->nlive : o->batch;
		ret = release_oldest(w, k, false);
		if (ret)
			return ret;
	}
	return 0;
}

static int worker_init(struct worker *w, const struct opts *o, unsigned idx)
{
	struct kv_pool_info info;
	char who[32];

	memset(w, 0, sizeof(*w));
	w->o = o;
	w->idx = idx;
	w->rng = splitmix64(o->seed) ^ splitmix64(idx + 1);
	w->res_rng = ~w->rng;
	w->gen_base = splitmix64(o->seed ^ 0x6b76626eULL);
	w->r.magic = KVB_RESULT_MAGIC;
	w->live = calloc(o->live_max, sizeof(*w->live));
	w->pend = calloc(o->batch, sizeof(*w->pend));
	w->res = calloc(o->batch, sizeof(*w->res));
	if (!w->live || !w->pend || !w->res ||
	    samples_init(&w->alloc, o->requests) ||
	    samples_init(&w->release, o->requests)) {
		fprintf(stderr, "kvbench: proc %u: out of memory\n", idx);
		return -ENOMEM;
	}
	snprintf(who, sizeof(who), "proc %u", idx);
	if (connect_kvd(o, &w->c, who))
		return -1;
	kv_pool_info(w->c, &info);
	w->words = info.block_bytes / sizeof(uint64_t);
	return 0;
}

/* ---- parent and children ---- */

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_result(struct worker *w, int fd)
{
	w->r.nr_alloc = w->alloc.nr;
	w->r.nr_release = w->release.nr;
	if (write_full(fd, &w->r, sizeof(w->r)) ||
	    write_full(fd, w->alloc.v, w->alloc.nr * sizeof(uint64_t)) ||
	    write_full(fd, w->release.v, w->release.nr * sizeof(uint64_t)))
		return -1;
	return 0;
}

/* Ready, wait for the parent's go byte, run, report. Never returns. */
static void __attribute__((noreturn))
child_main(const struct opts *o, unsigned idx, int go_fd, int out_fd)
{
	struct worker w;
	char go = 0;
	int ret;

	ret = worker_init(&w, o, idx);
	if (write_full(out_fd, ret ? "F" : "R", 1) || ret)
		_exit(1);
	if (read_full(go_fd, &go, 1) || go != 'g')
		_exit(1);
	w.r.t_start_ns = now_ns();
	ret = worker_run(&w);
	w.r.t_end_ns = now_ns();
	w.r.status = ret ? 1 : 0;
	kv_disconnect(w.c);
	if (send_result(&w, out_fd))
		_exit(1);
	_exit(ret ? 1 : 0);
}

static int spawn(const struct opts *o, struct child *ch, unsigned idx,
		 int go[2])
{
	pid_t parent = getpid();
	int p[2];

	if (pipe2(p, O_CLOEXEC)) {
		perror("kvbench: pipe");
		return -1;
	}
	ch->pid = fork();
	if (ch->pid < 0) {
		perror("kvbench: fork");
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (ch->pid == 0) {
		/* Never outlive the parent; it may have died already. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(p[0]);
		close(go[1]);
		child_main(o, idx, go[0], p[1]);
	}
	close(p[1]);
	ch->fd = p[0];
	return 0;
}

/* Tell every process to start ('g') or to give up ('a'). */
static void release_all(int go_fd, unsigned n, char what)
{
	char buf[KVB_MAX_PROCS];

	memset(buf, what, n);
	if (write_full(go_fd, buf, n))
		perror("kvbench: start pipe");
}

/* Read one process's results; ch->r is set only when all arrived. */
static void collect(struct child *ch, unsigned idx)
{
	struct kvb_result r;

	if (read_full(ch->fd, &r, sizeof(r)) || r.magic != KVB_RESULT_MAGIC)
		return;
	ch->alloc = malloc((r.nr_alloc + 1) * sizeof(uint64_t));
	ch->release = malloc((r.nr_release + 1) * sizeof(uint64_t));
	if (!ch->alloc || !ch->release) {
		fprintf(stderr, "kvbench: out of memory for proc %u's samples\n",
			idx);
		return;
	}
	if (read_full(ch->fd, ch->alloc, r.nr_alloc * sizeof(uint64_t)) ||
	    read_full(ch->fd, ch->release, r.nr_release * sizeof(uint64_t)))
		return;
	ch->r = r;
	ch->got = true;
}

/* Why a process failed, or NULL when it did not. */
static const char *child_failure(const struct child *ch, char *buf,
				 size_t len)
{
	int st = ch->wstatus;

	if (WIFSIGNALED(st)) {
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
		return buf;
	}
	if (!ch->ready) {
		snprintf(buf, len, "could not connect to kvd (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	if (!ch->started)
		return NULL;	/* stopped because another one failed */
	if (!ch->got) {
		snprintf(buf, len, "sent no results (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	if (WEXITSTATUS(st) || ch->r.status) {
		snprintf(buf, len, "failed during the run (exit %d)",
			 WEXITSTATUS(st));
		return buf;
	}
	return NULL;
}

static unsigned reap_all(struct child *ch, unsigned n)
{
	unsigned failed = 0;
	char why[96];

	for (unsigned i = 0; i < n; i++) {
		while (waitpid(ch[i].pid, &ch[i].wstatus, 0) < 0 &&
		       errno == EINTR)
			;
		close(ch[i].fd);
		if (child_failure(&ch[i], why, sizeof(why))) {
			fprintf(stderr, "kvbench: proc %u (pid %d) %s\n", i,
				(int)ch[i].pid, why);
			failed++;
		}
	}
	return failed;
}

/*
 * Fork all, wait until each is connected, start them together, collect.
 * Returns 0 when all ran fine, 1 when one failed, -1 when none started.
 */
static int run_children(const struct opts *o, struct child *ch)
{
	unsigned started = 0, ready = 0;
	int go[2];
	char b;

	if (pipe2(go, O_CLOEXEC)) {
		perror("kvbench: pipe");
		return -1;
	}
	fflush(NULL);
	for (; started < o->procs; started++)
		if (spawn(o, &ch[started], started, go))
			break;
	close(go[0]);
	for (unsigned i = 0; i < started; i++) {
		ch[i].ready = !read_full(ch[i].fd, &b, 1) && b == 'R';
		ready += ch[i].ready;
	}
	release_all(go[1], started, ready == o->procs ? 'g' : 'a');
	close(go[1]);
	for (unsigned i = 0; ready == o->procs && i < started; i++) {
		ch[i].started = true;
		collect(&ch[i], i);
	}
	if (reap_all(ch, started) || ready < o->procs) {
		if (ready < o->procs)
			fprintf(stderr, "kvbench: %u of %u processes ready; run not started\n",
				ready, o->procs);
		return ready < o->procs ? -1 : 1;
	}
	return 0;
}

/* ---- report ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted @v, in microseconds. */
static double pct_us(const uint64_t *v, uint64_t n, unsigned p)
{
	uint64_t rank = (n * p + 99) / 100;

	if (!n)
		return 0;
	return (double)v[rank ? rank - 1 : 0] / 1e3;
}

static double per_s(uint64_t count, uint64_t ns)
{
	return ns ? (double)count * 1e9 / (double)ns : 0;
}

static void sum_result(struct kvb_result *s, const struct kvb_result *r)
{
	s->requests += r->requests;
	s->alloc_ops += r->alloc_ops;
	s->release_ops += r->release_ops;
	s->blocks += r->blocks;
	s->enospc += r->enospc;
	s->forced += r->forced;
	s->waits += r->waits;
	s->bad_blocks += r->bad_blocks;
	s->bad_words += r->bad_words;
	s->bytes_checked += r->bytes_checked;
	s->alloc_sum_ns += r->alloc_sum_ns;
	s->release_sum_ns += r->release_sum_ns;
	if (r->alloc_max_ns > s->alloc_max_ns)
		s->alloc_max_ns = r->alloc_max_ns;
	if (r->release_max_ns > s->release_max_ns)
		s->release_max_ns = r->release_max_ns;
}

/* Sum counts, merge and sort samples (each process's sorted too). */
static int aggregate(struct agg *a, struct child *ch, unsigned n)
{
	uint64_t na = 0, nr = 0;

	for (unsigned i = 0; i < n; i++) {
		if (!ch[i].got)
			continue;
		na += ch[i].r.nr_alloc;
		nr += ch[i].r.nr_release;
	}
	a->alloc = malloc((na + 1) * sizeof(uint64_t));
	a->release = malloc((nr + 1) * sizeof(uint64_t));
	if (!a->alloc || !a->release)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		struct kvb_result *r = &ch[i].r;

		if (!ch[i].got)
			continue;
		sum_result(&a->sum, r);
		if (!a->t_start || r->t_start_ns < a->t_start)
			a->t_start = r->t_start_ns;
		if (r->t_end_ns > a->t_end)
			a->t_end = r->t_end_ns;
		qsort(ch[i].alloc, r->nr_alloc, sizeof(uint64_t), cmp_u64);
		qsort(ch[i].release, r->nr_release, sizeof(uint64_t), cmp_u64);
		memcpy(a->alloc + a->nr_alloc, ch[i].alloc,
		       r->nr_alloc * sizeof(uint64_t));
		memcpy(a->release + a->nr_release, ch[i].release,
		       r->nr_release * sizeof(uint64_t));
		a->nr_alloc += r->nr_alloc;
		a->nr_release += r->nr_release;
	}
	qsort(a->alloc, a->nr_alloc, sizeof(uint64_t), cmp_u64);
	qsort(a->release, a->nr_release, sizeof(uint64_t), cmp_u64);
	return 0;
}

static void emit_config(struct kv_emit *e, const struct opts *o,
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
	kv_emit_str(e, "model", "model", o->model);
	kv_emit_u64(e, "layers", "layers", o->geom.layers);
	kv_emit_u64(e, "kv_heads", "kv heads", o->geom.kv_heads);
	kv_emit_u64(e, "head_dim", "head dim", o->geom.head_dim);
	kv_emit_u64(e, "block_tokens", "block tokens", o->geom.block_tokens);
	kv_emit_str(e, "dtype", "dtype", o->dtype_name);
	kv_emit_u64(e, "block_bytes", "block bytes", a->info.block_bytes);
	kv_emit_obj_end(e);
}

static void emit_results(struct kv_emit *e, const struct agg *a)
{
	const struct kvb_result *s = &a->sum;
	uint64_t wall = a->t_end - a->t_start;
	uint64_t ops = s->alloc_ops + s->release_ops;

	kv_emit_obj_begin(e, "results", "results");
	kv_emit_u64(e, "requests", "requests", s->requests);
	kv_emit_u64(e, "ops", "ops (ALLOC + RELEASE)", ops);
	kv_emit_u64(e, "alloc_ops", "ALLOC ops", s->alloc_ops);
	kv_emit_u64(e, "release_ops", "RELEASE ops", s->release_ops);
	kv_emit_u64(e, "blocks", "blocks allocated", s->blocks);
	kv_emit_f64(e, "wall_s", "wall time (s)", (double)wall / 1e9);
	kv_emit_f64(e, "ops_per_s", "ops/s", per_s(ops, wall));
	/* -ENOSPC answers are cheap ops: this one counts only done work. */
	kv_emit_f64(e, "requests_per_s", "requests/s",
		    per_s(s->requests, wall));
	kv_emit_f64(e, "blocks_per_s", "blocks/s", per_s(s->blocks, wall));
	kv_emit_u64(e, "enospc", "ALLOC -ENOSPC", s->enospc);
	kv_emit_u64(e, "forced", "forced releases", s->forced);
	kv_emit_u64(e, "enospc_waits", "waits for room", s->waits);
	kv_emit_u64(e, "bytes_verified", "bytes verified", s->bytes_checked);
	kv_emit_u64(e, "pattern_errors", "pattern errors (blocks)",
		    s->bad_blocks);
	kv_emit_u64(e, "pattern_bad_words", "pattern errors (words)",
		    s->bad_words);
	kv_emit_obj_end(e);
}

static void emit_op_latency(struct kv_emit *e, const char *key,
			    const char *label, const uint64_t *v, uint64_t n,
			    uint64_t sum, uint64_t ops, uint64_t max)
{
	kv_emit_obj_begin(e, key, label);
	kv_emit_f64(e, "p50", "p50", pct_us(v, n, 50));
	kv_emit_f64(e, "p99", "p99", pct_us(v, n, 99));
	kv_emit_f64(e, "mean", "mean", ops ? (double)sum / ops / 1e3 : 0);
	kv_emit_f64(e, "max", "max", (double)max / 1e3);
	kv_emit_u64(e, "samples", "samples", n);
	kv_emit_obj_end(e);
}

static void emit_latency(struct kv_emit *e, const struct opts *o,
			 const struct agg *a)
{
	const struct kvb_result *s = &a->sum;

	kv_emit_obj_begin(e, "latency_us", "latency (us)");
	kv_emit_str(e, "measured", "measured",
		    o->batch > 1 ?
		    "per batch: submit to last CQE, counted for each op in it" :
		    "per op: one synchronous round trip");
	emit_op_latency(e, "alloc", "ALLOC", a->alloc, a->nr_alloc,
			s->alloc_sum_ns, s->alloc_ops, s->alloc_max_ns);
	emit_op_latency(e, "release", "RELEASE", a->release, a->nr_release,
			s->release_sum_ns, s->release_ops, s->release_max_ns);
	kv_emit_obj_end(e);
}

static void emit_pool(struct kv_emit *e, const struct agg *a)
{
	const struct kv_stats *st = a->have_after ? &a->after : &a->before;
	uint64_t peak = (uint64_t)st->peak_pages_used * KV_PAGE_BYTES;

	kv_emit_obj_begin(e, "pool", "pool");
	kv_emit_u64(e, "pool_bytes", "pool bytes", st->pool_bytes);
	kv_emit_u64(e, "nr_pages", "pages", st->nr_pages);
	kv_emit_u64(e, "max_blocks", "max blocks", a->info.max_blocks);
	kv_emit_u64(e, "pages_used_before", "pages used before",
		    a->before.pages_used);
	kv_emit_u64(e, "peak_pages_used", "peak pages used",
		    st->peak_pages_used);
	kv_emit_u64(e, "peak_bytes", "peak bytes used", peak);
	kv_emit_f64(e, "peak_pct", "peak use (%)", st->nr_pages ?
		    100.0 * st->peak_pages_used / st->nr_pages : 0);
	kv_emit_str(e, "peak_scope", "peak scope",
		    a->after.peak_pages_used > a->before.peak_pages_used ?
		    "this run (kvd's peak since start, raised by it)" :
		    "kvd's peak since start (not exceeded by this run)");
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
	char why[96];

	kv_emit_table_begin(e, "procs", proc_cols,
			    sizeof(proc_cols) / sizeof(proc_cols[0]));
	for (unsigned i = 0; i < n; i++) {
		const struct kvb_result *r = &ch[i].r;
		uint64_t ops = r->alloc_ops + r->release_ops;

		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, i);
		kv_emit_cell_u64(e, (uint64_t)ch[i].pid);
		kv_emit_cell_u64(e, r->requests);
		kv_emit_cell_u64(e, ops);
		kv_emit_cell_f64(e, per_s(ops, r->t_end_ns - r->t_start_ns));
		kv_emit_cell_f64(e, pct_us(ch[i].alloc, r->nr_alloc, 50));
		kv_emit_cell_f64(e, pct_us(ch[i].alloc, r->nr_alloc, 99));
		kv_emit_cell_f64(e, pct_us(ch[i].release, r->nr_release, 50));
		kv_emit_cell_f64(e, pct_us(ch[i].release, r->nr_release, 99));
		kv_emit_cell_u64(e, r->max_live_blocks);
		kv_emit_cell_u64(e, r->forced);
		kv_emit_cell_u64(e, r->bad_blocks);
		kv_emit_cell_str(e, r->bad_blocks ||
				 child_failure(&ch[i], why, sizeof(why)) ?
				 "FAIL" : "ok");
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static void report(FILE *f, bool json, const struct opts *o,
		   const struct agg *a, const struct child *ch, bool ok)
{
	struct kv_emit e;
	char mode[32];

	if (o->batch > 1)
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
	emit_config(&e, o, a);
	emit_results(&e, a);
	emit_latency(&e, o, a);
	emit_pool(&e, a);
	kv_emit_obj_end(&e);
	emit_procs(&e, ch, o->procs);
	kv_emit_end(&e);
}

static int write_json(const struct opts *o, FILE *f, const struct agg *a,
		      const struct child *ch, bool ok)
{
	report(f, true, o, a, ch, ok);
	if (ferror(f) | fclose(f)) {
		fprintf(stderr, "kvbench: --json %s: write failed\n",
			o->json_path);
		return -1;
	}
	return 0;
}

/* ---- main ---- */

/* Connect once: kvd is there, takes this geometry, and a request fits. */
static int probe(const struct opts *o, struct agg *a)
{
	struct kv_client *c;
	int ret;

	if (connect_kvd(o, &c, "cannot use kvd"))
		return 1;
	kv_pool_info(c, &a->info);
	ret = kv_stats(c, &a->before);
	kv_disconnect(c);
	if (ret) {
		fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
		return 1;
	}
	if (o->max_req_blocks > a->info.max_blocks) {
		fprintf(stderr, "kvbench: --max-tokens %u needs %u-block requests; the pool holds only %u blocks of %llu bytes\n",
			o->max_tokens, o->max_req_blocks, a->info.max_blocks,
			(unsigned long long)a->info.block_bytes);
		return 2;
	}
	if (a->info.block_bytes % sizeof(uint64_t)) {
		fprintf(stderr, "kvbench: %llu-byte blocks: not a whole number of 64-bit words\n",
			(unsigned long long)a->info.block_bytes);
		return 1;
	}
	return 0;
}

static int final_stats(const struct opts *o, struct agg *a)
{
	struct kv_client *c;
	int ret;

	if (connect_kvd(o, &c, "pool stats after the run"))
		return -1;
	ret = kv_stats(c, &a->after);
	kv_disconnect(c);
	if (ret) {
		fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
		return -1;
	}
	a->have_after = true;
	return 0;
}

/* Aggregate, report, and decide the exit status; closes @json. */
static int finish(const struct opts *o, struct agg *a, struct child *ch,
		  FILE *json, bool ok)
{
	if (aggregate(a, ch, o->procs)) {
		fprintf(stderr, "kvbench: out of memory for the samples\n");
		if (json)
			fclose(json);
		return 1;
	}
	if (final_stats(o, a))
		ok = false;
	ok = ok && !a->sum.bad_blocks;
	if (!o->quiet)
		report(stdout, false, o, a, ch, ok);
	if (json && write_json(o, json, a, ch, ok))
		ok = false;
	if (a->sum.bad_blocks)
		fprintf(stderr, "kvbench: %llu blocks did not verify\n",
			(unsigned long long)a->sum.bad_blocks);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct child *ch = NULL;
	struct agg a = { 0 };
	FILE *json = NULL;
	struct opts o;
	int ret;

	if (parse_args(&o, argc, argv)) {
		free(o.cmdline);
		return 2;
	}
	ret = probe(&o, &a);
	if (ret)
		goto out;
	if (o.json_path) {
		json = fopen(o.json_path, "w");
		if (!json) {
			fprintf(stderr, "kvbench: --json %s: %s\n",
				o.json_path, strerror(errno));
			ret = 2;
			goto out;
		}
	}
	/* A process that died must not take the parent with it. */
	signal(SIGPIPE, SIG_IGN);
	ch = calloc(o.procs, sizeof(*ch));
	if (!ch) {
		fprintf(stderr, "kvbench: out of memory\n");
		ret = 1;
		goto out;
	}
	ret = run_children(&o, ch);
	if (ret < 0) {
		/* Nothing ran: no report, and no empty JSON file left. */
		if (json) {
			fclose(json);
			json = NULL;
			unlink(o.json_path);
		}
		ret = 1;
		goto out;
	}
	ret = finish(&o, &a, ch, json, !ret);
	json = NULL;
out:
	if (json)
		fclose(json);
	for (unsigned i = 0; ch && i < o.procs; i++) {
		free(ch[i].alloc);
		free(ch[i].release);
	}
	free(ch);
	free(a.alloc);
	free(a.release);
	free(o.cmdline);
	return ret;
}
