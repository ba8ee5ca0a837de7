// SPDX-License-Identifier: MIT
/*
 * kvbench: several engine processes load kvd, in one of two modes.
 *
 * alloc/release (the default): each process connects and, for every
 * request, allocates ceil(tokens / block_tokens) blocks (tokens uniform
 * in [--min-tokens, --max-tokens]), fills every byte of them with a
 * pattern derived from (block id, generation), keeps --live requests at
 * once, and verifies the oldest just before it releases it. A generation
 * is unique per (process, request), so a block that kvd hands to two
 * holders, or that anyone else writes, fails the check. Only the ALLOC
 * and RELEASE round trips are timed; the pattern work is not.
 *
 * replay (--trace FILE or --synthetic): the parent reads a request
 * stream (tools/trace.c) and request i goes to process i % procs, in
 * arrival order. Per request a process hashes the prompt's full blocks,
 * opens a kv_seq on them (prefix lookup + allocation), stamps the blocks
 * it has to fill and checks the stamps of the blocks it hit, commits the
 * prompt, appends the output in --decode-chunk pieces, commits, and
 * keeps the request open until it leaves the --live window (FIFO). The
 * parent computes the same stream's infinite-cache bound and, with
 * --compare-allocators, what static, chunked and plain paged allocation
 * would have needed over the same schedule.
 *
 * With --models N (N >= 2) the processes serve N models, process i model
 * i % N, each model a namespace of its own geometry (model k: k + 1
 * times --layers), and every model replays the whole stream, in phases
 * of --phase-requests requests that take turns: model 0 replays its
 * first phase while the others idle, then model 1 its first, ..., then
 * model 0 its second. A model's processes close all their requests at
 * the end of its phase, so what it keeps is cached blocks, which kvd may
 * reclaim for the busy model (elastic sharing). Meanwhile the parent
 * samples kvd's admin socket every --sample-ms and reports pages, blocks
 * and the hit ratio so far of each namespace over time.
 *
 * Counts and latency samples travel to the parent through one pipe per
 * process; the parent reports them as a table and optionally as JSON
 * (tools/emit.h).
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <kv/kv.h>

#include "admin.h"
#include "bench_common.h"
#include "emit.h"
#include "trace.h"

#define NSEC_PER_SEC		1000000000ULL
#define KVB_MAX_PROCS		64
#define KVB_MAX_REQUESTS	1000000U	/* samples: 16 bytes each */
#define KVB_MAX_TOKENS		(1U << 20)
#define KVB_MAX_BATCH		1024U
#define KVB_MAX_LIVE		4096U
#define KVB_MAX_MSGS		16	/* mismatch lines per process */
#define KVB_MAX_SAMPLES		(1U << 20)	/* per op and process */
#define KVB_ENOSPC_GIVEUP_NS	(30 * NSEC_PER_SEC)
#define KVB_RESULT_MAGIC	0x5242564bU	/* "KVBR" */
/* Odd, so the words of one block never repeat. */
#define KVB_PATTERN_STEP	0x9e3779b97f4a7c15ULL
#define KVB_STAMP_BYTES		64	/* checked at each end of a block */
#define KVB_CHUNK_TOKENS	256	/* --compare-allocators: chunked unit */
#define KVB_DEFAULT_TRACE_BLOCK	512
#define KVB_SYN_PER_PROC	2000	/* --synthetic requests per process */
#define KVB_MAX_MODELS		8
#define KVB_DEFAULT_SAMPLE_MS	200
#define KVB_MAX_POINTS		(1U << 20)	/* time-series samples kept */
#define KVB_PHASE_POLL_NS	100000000L	/* re-check a phase wait */

enum kvb_mode {
	KVB_MODE_ALLOC,		/* alloc/release with patterns */
	KVB_MODE_REPLAY,	/* --trace or --synthetic */
};

/* Timed operations; each has its latency samples. */
enum kvb_op {
	KVB_OP_ALLOC,
	KVB_OP_RELEASE,
	KVB_OP_HASH,		/* block hashes of a prompt */
	KVB_OP_OPEN,		/* kv_seq_open_hashes: lookup + alloc */
	KVB_OP_COMMIT,		/* kv_seq_commit */
	KVB_OP_APPEND,		/* kv_seq_append of one chunk */
	KVB_OP_CLOSE,		/* kv_seq_close */
	KVB_NR_OPS,
};

static const char *const op_key[KVB_NR_OPS] = {
	"alloc", "release", "hash", "open", "commit", "append", "close",
};

static const char *const op_label[KVB_NR_OPS] = {
	"ALLOC", "RELEASE", "hash", "open (lookup + alloc)", "commit",
	"append", "close",
};

/*
 * Shared by the replay's processes (an anonymous shared mapping made
 * before they fork), per model:
 *  - unused_slots: allocated-but-unused slots of its open sequences.
 *  - next: the model's request that may open next, so that prefix
 *    lookups happen in arrival order across its processes (a futex word;
 *    KVB_TURN_STOP when a process failed and the others must stop).
 *  - done: its processes that finished the current phase.
 *  - prompt_blocks, hit_blocks: what its processes looked up and hit so
 *    far, for the parent's time series.
 * and for all:
 *  - starved: processes waiting for room with nothing of their own to
 *    close; while it is not zero, processes waiting for their turn close
 *    their oldest requests.
 *  - phase: the phase being replayed (a futex word; the busy model is
 *    phase % models; KVB_TURN_STOP when the run stops).
 */
struct kvb_mshared {
	_Atomic int64_t	unused_slots;
	_Atomic uint32_t next;
	_Atomic uint32_t done;
	_Atomic uint64_t prompt_blocks;
	_Atomic uint64_t hit_blocks;
};

struct kvb_shared {
	_Atomic uint32_t starved;
	_Atomic uint32_t phase;
	struct kvb_mshared m[KVB_MAX_MODELS];
};

#define KVB_TURN_STOP		UINT32_MAX
#define KVB_TURN_POLL_NS	1000000L	/* re-check starved this often */
#define KVB_STATUS_STOPPED	2		/* another process failed */
#define KVB_PREEMPT_NS		10000000ULL	/* starved this long: preempt */
#define KVB_MAX_PREEMPT		1000		/* per request */

/* One model of a --models run: a namespace of its own. */
struct kvb_model {
	char		id[KV_MODEL_ID_MAX];
	struct kv_geometry geom;
	unsigned	procs;		/* processes i with i % models == it */
};

struct opts {
	enum kvb_mode	mode;
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
	unsigned	alloc_only;	/* alloc-mode options given (bits) */
	unsigned	replay_only;	/* replay options given (bits) */
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
};

/* One op's totals in one process. */
struct kvb_opstat {
	uint64_t	ops;
	uint64_t	sum_ns;
	uint64_t	max_ns;
	uint32_t	nr;		/* samples that follow the result */
	uint32_t	resv;
};

/* What one process sends its parent, followed by its samples. */
struct kvb_result {
	uint32_t	magic;
	int32_t		status;		/* 0: ran to the end */
	uint64_t	requests;
	uint64_t	blocks;		/* blocks allocated */
	uint64_t	enospc;		/* answered -ENOSPC */
	uint64_t	forced;		/* released early for room */
	uint64_t	waits;		/* -ENOSPC, nothing of ours to free */
	uint64_t	bad_blocks;	/* pattern or stamp did not verify */
	uint64_t	bad_words;
	uint64_t	bytes_checked;
	uint64_t	syscalls;	/* libkvclient's, during the run */
	uint64_t	serve_ns;	/* batches: submit to last CQE, summed */
	uint64_t	t_start_ns;
	uint64_t	t_end_ns;
	struct kvb_opstat op[KVB_NR_OPS];
	uint32_t	max_live_blocks;
	uint32_t	resv;
	/* replay */
	uint64_t	prompt_tokens;
	uint64_t	hit_tokens;
	uint64_t	prompt_blocks;	/* full prompt blocks looked up */
	uint64_t	hit_blocks;
	uint64_t	output_tokens;
	uint64_t	peak_used;	/* most ns_blocks_used seen */
	int64_t		peak_unused;	/* unused slots at that sample */
	double		waste_sum;	/* sum of per-sample waste fractions */
	uint64_t	waste_samples;
	uint32_t	nr_spans;	/* follow the samples */
	uint32_t	resv2;
	uint64_t	preempted;	/* requests redone for room */
};

/* When one replayed request was open, for the as-run schedule. */
struct kvb_span {
	uint64_t	t_open;		/* before its open */
	uint64_t	t_close;	/* after its close */
	uint32_t	req;
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

/* One open request of a replay. */
struct rseq {
	struct kv_seq	*s;
	size_t		req;
	int64_t		unused;		/* its share of kvb_shared */
	struct kvb_span	*span;
};

struct worker {
	const struct opts *o;
	struct kv_client *c;
	unsigned	idx;
	unsigned	model;		/* idx % models */
	unsigned	rank;		/* among its model's processes */
	unsigned	mprocs;		/* its model's processes */
	struct kvb_mshared *ms;	/* its model's shared books (replay) */
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
	struct samples	s[KVB_NR_OPS];
	struct kvb_result r;
	/* replay */
	struct rseq	*seqs;		/* ring of o->live, oldest first */
	uint64_t	*sub;		/* sub-block ids of one prompt */
	struct kv_hash	*hash;		/* its full blocks, prompt first */
	uint32_t	*tok;		/* its tokens from tok_base on */
	uint64_t	t_go;		/* phase start, for --timestamps */
	uint64_t	t_base_us;	/* arrival of the phase's first request */
	struct kvb_span	*spans;		/* one per request opened */
	uint32_t	nr_spans;
	bool		starving;	/* counted in kvb_shared.starved */
	bool		stopped;	/* another process failed */
};

struct child {
	pid_t		pid;
	int		fd;
	bool		ready;
	bool		started;	/* told to go */
	bool		got;		/* results arrived */
	int		wstatus;
	struct kvb_result r;
	uint64_t	*samp[KVB_NR_OPS];	/* sorted samples */
	struct kvb_span	*spans;
};

/* One moment of the time series: the pool and the phase. */
struct kvb_point {
	uint64_t	t_ns;		/* since the start */
	uint32_t	phase;
	uint32_t	pool_used;	/* pages in slabs of any namespace */
};

/* One namespace at that moment. */
struct kvb_nspoint {
	uint32_t	pages;		/* 0 too when kvd had no such namespace */
	uint32_t	used;		/* blocks with ref > 0 */
	uint32_t	cached;		/* committed, ref 0 */
	uint32_t	resv;
	uint64_t	prompt_blocks;	/* so far, its processes' counts */
	uint64_t	hit_blocks;
};

/* Points, and models namespace points per point (ns[i * models + m]). */
struct kvb_series {
	size_t		nr, cap;
	struct kvb_point *pt;
	struct kvb_nspoint *ns;
	bool		failed;		/* an admin call failed (said once) */
	bool		full;		/* KVB_MAX_POINTS reached (said once) */
};

struct agg {
	struct kvb_result sum;
	uint64_t	t_start, t_end;
	uint64_t	*samp[KVB_NR_OPS];	/* sorted, all processes */
	uint64_t	nsamp[KVB_NR_OPS];
	struct kv_pool_info info[KVB_MAX_MODELS];
	struct kv_stats	before[KVB_MAX_MODELS], after[KVB_MAX_MODELS];
	bool		have_after;
	unsigned	failed;
	/* replay */
	struct kv_client *mon[KVB_MAX_MODELS];	/* keep the namespaces */
	struct kvb_bound bound;
	struct kvb_alloc_sim sim;	/* offline schedule */
	struct kvb_alloc_sim run;	/* as-run schedule */
	bool		have_sim, have_run;
	/* per model; the time series */
	struct kvb_result msum[KVB_MAX_MODELS];
	uint64_t	t_go;
	void		*reply;		/* KV_ADMIN_REPLY_MAX bytes */
	struct kv_admin_status st0, st1;	/* before and after the run */
	bool		have_st1;
	struct bench_perf_counts perf;	/* --perf-stat: kvd's, over the run */
	bool		have_perf;
	struct kvb_series ts;
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
	OPT_NO_VERIFY,
	OPT_PERF_STAT,
	OPT_KVD,
};

/* Options of one mode only, to refuse them in the other. */
#define ALLOC_OPT_REQUESTS	(1U << 0)
#define ALLOC_OPT_MIN_TOKENS	(1U << 1)
#define ALLOC_OPT_MAX_TOKENS	(1U << 2)
#define ALLOC_OPT_BATCH		(1U << 3)

static const char *const alloc_opt_names[] = {
	"--requests", "--min-tokens", "--max-tokens", "--batch",
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
	{ "quant",	  required_argument, NULL, OPT_QUANT },
	{ "model",	  required_argument, NULL, OPT_MODEL },
	{ "json",	  required_argument, NULL, OPT_JSON },
	{ "trace",	  required_argument, NULL, OPT_TRACE },
	{ "synthetic",	  no_argument,	     NULL, OPT_SYNTHETIC },
	{ "trace-block",  required_argument, NULL, OPT_TRACE_BLOCK },
	{ "limit",	  required_argument, NULL, OPT_LIMIT },
	{ "timestamps",	  optional_argument, NULL, OPT_TIMESTAMPS },
	{ "compare-allocators", no_argument, NULL, OPT_COMPARE },
	{ "max-model-len", required_argument, NULL, OPT_MAX_MODEL_LEN },
	{ "decode-chunk", required_argument, NULL, OPT_DECODE_CHUNK },
	{ "salt",	  required_argument, NULL, OPT_SALT },
	{ "models",	  required_argument, NULL, OPT_MODELS },
	{ "phase-requests", required_argument, NULL, OPT_PHASE_REQUESTS },
	{ "sample-ms",	  required_argument, NULL, OPT_SAMPLE_MS },
	{ "admin-socket", required_argument, NULL, OPT_ADMIN_SOCKET },
	{ "private-kvd",  optional_argument, NULL, OPT_PRIVATE_KVD },
	{ "no-verify",	  no_argument,	     NULL, OPT_NO_VERIFY },
	{ "perf-stat",	  no_argument,	     NULL, OPT_PERF_STAT },
	{ "kvd",	  required_argument, NULL, OPT_KVD },
	{ "quiet",	  no_argument,	     NULL, 'q' },
	{ "help",	  no_argument,	     NULL, 'h' },
	{ 0 }
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvbench [options]\n"
"       kvbench --trace FILE [replay options] [options]\n"
"       kvbench --synthetic [replay options] [options]\n"
"Start N engine processes that load kvd. By default they allocate, write,\n"
"verify and release blocks for synthetic requests and report ops/s,\n"
"latency and pool peak use. With --trace or --synthetic they replay a\n"
"request stream through the prefix cache (kv_seq) and report the hit\n"
"ratio against the infinite-cache bound, evictions, memory and latency.\n"
"  -s, --socket PATH      kvd socket (default $KVD_SOCKET, else\n"
"                         /run/kvd/kvd.sock as root, $XDG_RUNTIME_DIR/kvd.sock)\n"
"  -p, --procs N          engine processes, 1..%u (default 4)\n"
"  -l, --live N           requests each process holds at once, 1..%u\n"
"                         (default 8; with --batch, rounded up to whole\n"
"                         batches)\n"
"      --seed N           request lengths, patterns, synthetic workload\n"
"                         (default 1)\n"
"      --layers N         model geometry (default 4)\n"
"      --kv-heads N       (default 2)\n"
"      --head-dim N       (default 64)\n"
"      --block-tokens N   (default 16)\n"
"      --dtype T          fp16, bf16, fp32, fp8 or int8 (default fp16)\n"
"      --quant Q          fp8/int8 scales: token (default), channel or none\n"
"      --no-verify        do not write or check block bytes: measure kvd's\n"
"                         books only (as a block manager benchmark does)\n"
"      --perf-stat        count kvd's system calls, page faults and context\n"
"                         switches during the run (perf stat on its pid)\n"
"      --model NAME       model id (default kvbench)\n"
"      --json FILE        also write the report as JSON to FILE\n"
"  -q, --quiet            no report on stdout (errors still on stderr)\n"
"      --private-kvd[=SIZE]  start a kvd of our own (host pool of SIZE,\n"
"                         default 256M) on a temp socket, stop it after\n"
"      --kvd PATH         the kvd binary it starts (default: beside\n"
"                         kvbench)\n"
"  -h, --help\n"
"alloc/release benchmark:\n"
"  -n, --requests N       requests per process, 1..%u (default 2000)\n"
"      --min-tokens N     shortest request (default 64)\n"
"      --max-tokens N     longest request (default 2048); lengths are\n"
"                         uniform in [min, max], blocks = ceil(tokens /\n"
"                         block_tokens)\n"
"  -b, --batch N          1: one synchronous kv_alloc/kv_release per\n"
"                         request (default); 2..%u: N ALLOC SQEs per\n"
"                         submit, then N RELEASE SQEs per submit\n"
"replay:\n"
"      --trace FILE       Mooncake .jsonl, Azure .csv or .kvdtrc\n"
"      --synthetic        built-in workload: shared system prompts,\n"
"                         multi-turn chats, unique messages (from --seed;\n"
"                         --limit requests, default 2000 x --procs)\n"
"      --trace-block N    tokens per Mooncake hash id (default 512)\n"
"      --limit N          replay only the first N requests\n"
"      --timestamps[=S]   start each request no earlier than its arrival\n"
"                         time x S (default S 1; without: as fast as\n"
"                         possible, in arrival order)\n"
"      --decode-chunk N   output tokens per kv_seq_append (default\n"
"                         block_tokens; 0: the whole output at once)\n"
"      --compare-allocators  also report static, chunked (256 tokens) and\n"
"                         paged allocation over the same schedule\n"
"      --max-model-len N  what static allocation reserves per request\n"
"                         (default: the longest prompt + output replayed)\n"
"      --salt N           seed of the block hashes (default: random, so\n"
"                         a run never hits an earlier run's blocks)\n"
"      --models N         N models, 1..%u (default 1): process i serves\n"
"                         model i %% N; model k has k + 1 times --layers\n"
"                         and id MODEL-mk (model 0: MODEL); each replays\n"
"                         the whole stream, the models taking turns\n"
"      --phase-requests N requests of one model's turn (default: a\n"
"                         quarter of the stream)\n"
"      --sample-ms N      sample kvd's namespaces every N ms (default 200\n"
"                         with --models; without, no time series)\n"
"      --admin-socket PATH  kvd's admin socket, for the samples (default\n"
"                         kvd-admin.sock beside the client socket)\n"
"benchmarks (see kvbench(8), Benchmarks; each starts a private kvd\n"
"unless --socket names one; --json, --kvd and --quiet apply):\n"
"      --workload FILE    replay a kvdtrc block-manager workload (the\n"
"                         shared_prompts lifecycle), median of --runs N\n"
"      --floor            round-trip floors (shared memory, eventfd,\n"
"                         socket) and kvd's NOP and ALLOC+RELEASE vs them\n"
"      --hash-bench       kv_hash_blocks throughput vs XXH3 and SHA-256\n"
"      --redis            32-key MGET on a private redis-server vs\n"
"                         kvd's 32-block LOOKUP\n"
"      --bench-summary DIR  one table from DIR/bench-*.json (make bench)\n"
"      --runs N           --workload: runs, median reported (default 5)\n"
"  -n, --iterations N     --floor, --redis: round trips (default 20000)\n"
"Exit status: 0 ok, 1 a process failed or a block did not verify,\n"
"2 usage error.\n",
		KVB_MAX_PROCS, KVB_MAX_LIVE, KVB_MAX_REQUESTS, KVB_MAX_BATCH,
		KVB_MAX_MODELS);
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

static int parse_quant(const char *s, struct opts *o)
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

static const char *quant_name(uint32_t q)
{
	return q == KV_QUANT_TOKEN ? "token" : q == KV_QUANT_CHANNEL ?
	       "channel" : "none";
}

/* fp8 and int8 carry per-token scales unless told otherwise (as vLLM's
 * fp8 cache does); scales only with those dtypes. */
static int quant_setup(struct opts *o)
{
	bool q8 = o->geom.dtype == KV_DTYPE_FP8_E4M3 ||
		  o->geom.dtype == KV_DTYPE_INT8;

	if (!o->quant_given && q8)
		o->geom.quant = KV_QUANT_TOKEN;
	if (o->geom.quant && !q8) {
		fprintf(stderr, "kvbench: --quant %s needs --dtype fp8 or int8\n",
			quant_name(o->geom.quant));
		return -1;
	}
	return 0;
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
	o->trace_block = KVB_DEFAULT_TRACE_BLOCK;
	o->ts_scale = 1;
	o->models = 1;
}

/* Replay options, by name, to refuse them without --trace/--synthetic. */
static const char *const replay_opt_names[] = {
	"--trace-block", "--limit", "--timestamps", "--compare-allocators",
	"--max-model-len", "--decode-chunk", "--salt", "--models",
	"--phase-requests", "--sample-ms", "--admin-socket",
};

static void replay_opt(struct opts *o, int opt)
{
	o->replay_only |= 1U << (opt - OPT_TRACE_BLOCK);
}

/* One option; returns 0, or -1 after saying what is wrong. */
static int parse_one(struct opts *o, int opt, const char *arg)
{
	if (opt >= OPT_TRACE_BLOCK && opt <= OPT_ADMIN_SOCKET)
		replay_opt(o, opt);
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
		o->alloc_only |= ALLOC_OPT_REQUESTS;
		return parse_uint("--requests", arg, 1, KVB_MAX_REQUESTS,
				  &o->requests);
	case OPT_MIN_TOKENS:
		o->alloc_only |= ALLOC_OPT_MIN_TOKENS;
		return parse_uint("--min-tokens", arg, 1, KVB_MAX_TOKENS,
				  &o->min_tokens);
	case OPT_MAX_TOKENS:
		o->alloc_only |= ALLOC_OPT_MAX_TOKENS;
		return parse_uint("--max-tokens", arg, 1, KVB_MAX_TOKENS,
				  &o->max_tokens);
	case 'b':
		o->alloc_only |= ALLOC_OPT_BATCH;
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
		return 0;
	case OPT_SYNTHETIC:
		o->synthetic = true;
		return 0;
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
		o->private_pool = arg ? arg : BENCH_PRIVATE_POOL;
		return 0;
	case OPT_KVD:
		o->kvd_bin = arg;
		return 0;
	case 'q':
		o->quiet = true;
		return 0;
	}
	return -1;
}

/* Options that belong to the other mode are mistakes, not no-ops. */
static int check_mode(struct opts *o)
{
	unsigned i;

	if (o->trace_path && o->synthetic) {
		fprintf(stderr, "kvbench: --trace and --synthetic exclude each other\n");
		return -1;
	}
	o->mode = o->trace_path || o->synthetic ? KVB_MODE_REPLAY :
						  KVB_MODE_ALLOC;
	if (o->mode == KVB_MODE_REPLAY && o->alloc_only) {
		for (i = 0; !(o->alloc_only & (1U << i)); i++)
			;
		fprintf(stderr, "kvbench: %s applies to the alloc/release benchmark, not to a replay%s\n",
			alloc_opt_names[i], i == 0 ? " (use --limit)" : "");
		return -1;
	}
	if (o->mode == KVB_MODE_ALLOC && o->replay_only) {
		for (i = 0; !(o->replay_only & (1U << i)); i++)
			;
		fprintf(stderr, "kvbench: %s needs --trace or --synthetic\n",
			replay_opt_names[i]);
		return -1;
	}
	return 0;
}

/*
 * The admin socket: --admin-socket, else kvd-admin.sock in the directory
 * of the client socket (as kvd places it), the client socket being the
 * one kv_connect(3) dials: --socket, $KVD_SOCKET, or its default.
 */
static int admin_default(struct opts *o)
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
static int models_setup(struct opts *o)
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
static int opts_finish(struct opts *o)
{
	uint64_t data;

	if (check_mode(o) || quant_setup(o))
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
	if (o->socket && o->private_pool) {
		fprintf(stderr, "kvbench: --socket names a kvd; --private-kvd starts one\n");
		goto err_usage;
	}
	if (o->kvd_bin && !o->private_pool) {
		fprintf(stderr, "kvbench: --kvd goes with --private-kvd\n");
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

static int connect_kvd(const struct opts *o, unsigned model,
		       struct kv_client **c, const char *who)
{
	struct kv_connect_params p = {
		.socket_path = o->socket,
		.model_id = o->mdl[model].id,
		.geom = o->mdl[model].geom,
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
	s->v = malloc(((size_t)cap + 1) * sizeof(*s->v));
	s->cap = cap;
	s->nr = 0;
	s->seen = 0;
	return s->v ? 0 : -ENOMEM;
}

static void sample_add(struct worker *w, struct samples *s, uint64_t ns)
{
	uint64_t j;

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

/* @nr ops of kind @op took @ns each (a batch counts once per op). */
static void record(struct worker *w, enum kvb_op op, uint64_t ns, unsigned nr)
{
	struct kvb_opstat *st = &w->r.op[op];

	for (unsigned i = 0; i < nr; i++) {
		sample_add(w, &w->s[op], ns);
		st->sum_ns += ns;
		if (ns > st->max_ns)
			st->max_ns = ns;
	}
	st->ops += nr;
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
		record(w, KVB_OP_ALLOC, now_ns() - t0, 1);
	}
	return 0;
}

static int release_sync(struct worker *w, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct req *q = live_at(w, i);
		uint64_t t0 = now_ns();

		w->res[i] = kv_release(w->c, q->ids, q->nblocks);
		record(w, KVB_OP_RELEASE, now_ns() - t0, 1);
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
	t0 = now_ns() - t0;
	w->r.serve_ns += t0;
	record(w, alloc ? KVB_OP_ALLOC : KVB_OP_RELEASE, t0, n);
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

static int alloc_run(struct worker *w)
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

static int alloc_init(struct worker *w)
{
	const struct opts *o = w->o;

	w->live = calloc(o->live_max, sizeof(*w->live));
	w->pend = calloc(o->batch, sizeof(*w->pend));
	w->res = calloc(o->batch, sizeof(*w->res));
	if (!w->live || !w->pend || !w->res ||
	    samples_init(&w->s[KVB_OP_ALLOC], o->requests) ||
	    samples_init(&w->s[KVB_OP_RELEASE], o->requests))
		return -ENOMEM;
	return 0;
}

/* ---- replay ---- */

/*
 * A block's stamp: KVB_STAMP_BYTES at each end, derived from its hash.
 * Whoever fills a block writes it before committing the block; whoever
 * hits the block checks it, so a hit on the wrong block (another hash's,
 * or one reused while cached) shows.
 */
static uint64_t stamp_word(const struct kv_hash *h, size_t i)
{
	uint64_t a, b;

	memcpy(&a, h->b, 8);
	memcpy(&b, h->b + 8, 8);
	return splitmix64(a ^ splitmix64(b + i));
}

static size_t stamp_words(const struct worker *w)
{
	size_t n = KVB_STAMP_BYTES / sizeof(uint64_t);

	return 2 * n < w->words ? n : w->words;
}

static int stamp_write(struct worker *w, kv_block_t id,
		       const struct kv_hash *h)
{
	uint64_t *p = kv_block_ptr(w->c, id);
	size_t n = stamp_words(w);

	if (!p) {
		fprintf(stderr, "kvbench: proc %u: kvd gave block id %u, outside the pool\n",
			w->idx, id);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		p[i] = stamp_word(h, i);
		p[w->words - 1 - i] = stamp_word(h, ~i);
	}
	return 0;
}

static void stamp_check(struct worker *w, kv_block_t id,
			const struct kv_hash *h, size_t req, size_t pos)
{
	const uint64_t *p = kv_block_ptr(w->c, id);
	size_t n = stamp_words(w), bad = 0;

	if (!p) {
		bad = 1;
	} else {
		for (size_t i = 0; i < n; i++)
			bad += (p[i] != stamp_word(h, i)) +
			       (p[w->words - 1 - i] != stamp_word(h, ~i));
		w->r.bytes_checked += 2 * n * sizeof(uint64_t);
	}
	if (!bad)
		return;
	w->r.bad_blocks++;
	w->r.bad_words += bad;
	if (w->msgs++ < KVB_MAX_MSGS)
		fprintf(stderr, "kvbench: proc %u: request %zu hit block %u at position %zu, but it does not hold that prefix's stamp (%zu words differ)\n",
			w->idx, req, id, pos, bad);
}

static struct rseq *seq_at(struct worker *w, uint32_t i)
{
	return &w->seqs[(w->head + i) % w->o->live];
}

static int seq_close(struct worker *w, bool forced)
{
	struct rseq *q = seq_at(w, 0);
	uint64_t t0 = now_ns(), t1;
	int ret = kv_seq_close(q->s);

	t1 = now_ns();
	record(w, KVB_OP_CLOSE, t1 - t0, 1);
	if (ret < 0) {
		fprintf(stderr, "kvbench: proc %u: kv_seq_close (request %zu): %s\n",
			w->idx, q->req, strerror(-ret));
		return -1;
	}
	q->span->t_close = t1;
	atomic_fetch_sub_explicit(&w->ms->unused_slots, q->unused,
				  memory_order_relaxed);
	q->s = NULL;
	w->head = (w->head + 1) % w->o->live;
	w->nlive--;
	if (forced)
		w->r.forced++;
	return 0;
}

/* -ENOSPC: close our oldest request, or wait for others to close theirs. */
static int make_room(struct worker *w, uint64_t *stuck_since,
		     unsigned *tries)
{
	w->r.enospc++;
	if (w->nlive)
		return seq_close(w, true);
	if (!w->starving) {
		atomic_fetch_add(&w->o->sh->starved, 1);
		w->starving = true;
	}
	return wait_for_room(w, stuck_since, tries);
}

static void fed(struct worker *w)
{
	if (w->starving)
		atomic_fetch_sub(&w->o->sh->starved, 1);
	w->starving = false;
}

/* ---- arrival order across processes ---- */

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long ns)
{
	struct timespec ts = { 0, ns };

	syscall(SYS_futex, addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Tell every process to stop waiting for a turn or a phase: one failed. */
static void turns_stop(struct kvb_shared *sh)
{
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++) {
		atomic_store_explicit(&sh->m[m].next, KVB_TURN_STOP,
				      memory_order_release);
		futex_wake_all(&sh->m[m].next);
	}
	atomic_store_explicit(&sh->phase, KVB_TURN_STOP, memory_order_release);
	futex_wake_all(&sh->phase);
}

/*
 * Wait until request @i may open: every earlier request of our model has
 * opened and committed its prompt. Meanwhile close our oldest requests
 * when another process starves for room. -1 when the run is stopping.
 */
static int turn_wait(struct worker *w, size_t i)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v;

	for (;;) {
		/* Acquire: pairs with the release in turn_pass. */
		v = atomic_load_explicit(&w->ms->next, memory_order_acquire);
		if (v == i)
			return 0;
		if (v == KVB_TURN_STOP) {
			w->stopped = true;
			return -1;
		}
		if (w->nlive && atomic_load(&sh->starved)) {
			if (seq_close(w, true))
				return -1;
			continue;
		}
		futex_wait(&w->ms->next, v, KVB_TURN_POLL_NS);
	}
}

static void turn_pass(struct worker *w, size_t i)
{
	uint32_t v = (uint32_t)i;

	/* Release: our commit happened before the next lookup starts. */
	if (atomic_compare_exchange_strong_explicit(&w->ms->next, &v, v + 1,
						    memory_order_release,
						    memory_order_relaxed))
		futex_wake_all(&w->ms->next);
}

/* Wait until phase @ph begins. -1 when the run is stopping. */
static int phase_wait(struct worker *w, uint32_t ph)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v;

	for (;;) {
		/* Acquire: pairs with the release in phase_end. */
		v = atomic_load_explicit(&sh->phase, memory_order_acquire);
		if (v == ph)
			return 0;
		if (v == KVB_TURN_STOP) {
			w->stopped = true;
			return -1;
		}
		futex_wait(&sh->phase, v, KVB_PHASE_POLL_NS);
	}
}

/*
 * This process is done with phase @ph (its requests closed); the last of
 * its model's processes to be done starts the next phase.
 */
static void phase_end(struct worker *w, uint32_t ph)
{
	struct kvb_shared *sh = w->o->sh;
	uint32_t v = ph;

	if (atomic_fetch_add(&w->ms->done, 1) + 1 < w->mprocs)
		return;
	atomic_store(&w->ms->done, 0);
	/* Not over KVB_TURN_STOP. Release: our closes come first. */
	if (atomic_compare_exchange_strong_explicit(&sh->phase, &v, ph + 1,
						    memory_order_release,
						    memory_order_relaxed))
		futex_wake_all(&sh->phase);
}

static int seq_failed(struct worker *w, const char *op, size_t i, int ret)
{
	fprintf(stderr, "kvbench: proc %u: %s (request %zu of %s): %s\n",
		w->idx, op, i, w->o->trace_path ? w->o->trace_path :
		"the synthetic workload", strerror(-ret));
	if (ret == -EOPNOTSUPP || ret == -ENOSYS)
		fprintf(stderr, "kvbench: this kvd or libkvclient has no prefix cache\n");
	return -1;
}

/* Hash request @i's prompt: w->hash[0..*np), tokens from *tok_base on. */
static int replay_hash(struct worker *w, size_t i, size_t *np,
		       size_t *tok_base)
{
	const struct opts *o = w->o;
	const struct kvb_trace *tr = o->tr;
	const struct kvb_treq *r = &tr->reqs[i];
	unsigned bt = o->geom.block_tokens;
	uint32_t len = r->in_len + r->out_len;
	uint64_t t0;
	int n;

	if (tr->kind == KVB_TRACE_IDS) {
		t0 = now_ns();
		*np = kvb_trace_subblocks(tr, i, bt, w->sub);
		for (size_t j = 0; j < *np; j++)
			kvb_subblock_hash(w->sub[j], o->salt, &w->hash[j]);
		record(w, KVB_OP_HASH, now_ns() - t0, 1);
		*tok_base = *np * bt;
		kvb_trace_fill(tr, i, o->salt, (uint32_t)*tok_base, len,
			       w->tok);
		return 0;
	}
	kvb_trace_prompt(tr, i, o->salt, w->tok);
	kvb_trace_fill(tr, i, o->salt, r->in_len, len, w->tok + r->in_len);
	t0 = now_ns();
	n = kv_hash_blocks(KV_HASH_XXH3_128, NULL, 0, w->tok, r->in_len, bt,
			   NULL, w->hash);
	record(w, KVB_OP_HASH, now_ns() - t0, 1);
	if (n < 0)
		return seq_failed(w, "kv_hash_blocks", i, n);
	*np = (size_t)n;
	*tok_base = 0;
	return 0;
}

/* Stamp blocks [*from, to) of @q's table with their hashes. */
static int stamp_range(struct worker *w, struct rseq *q, size_t *from,
		       size_t to)
{
	const kv_block_t *tab;
	uint32_t nr = 0;

	tab = kv_seq_block_table(q->s, &nr);
	if (to > nr) {
		fprintf(stderr, "kvbench: proc %u: request %zu has %u blocks, needs %zu\n",
			w->idx, q->req, nr, to);
		return -1;
	}
	for (; *from < to; (*from)++)
		if (stamp_write(w, tab[*from], &w->hash[*from]))
			return -1;
	return 0;
}

/* Append the output in decode chunks, stamping blocks as they fill. */
static int replay_output(struct worker *w, struct rseq *q, size_t np,
			 size_t tok_base)
{
	const struct opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[q->req];
	unsigned bt = o->geom.block_tokens;
	size_t len = r->in_len + r->out_len, pos = r->in_len, done = np;
	uint64_t stuck = 0;
	unsigned tries = 0;
	int ret;

	/* The hashes kv_seq gives the blocks that fill, to stamp them. */
	if (len / bt > np) {
		ret = kv_hash_blocks(KV_HASH_XXH3_128,
				     np ? &w->hash[np - 1] : NULL, np * bt,
				     w->tok + (np * bt - tok_base),
				     len - np * bt, bt, NULL, w->hash + np);
		if (ret < 0)
			return seq_failed(w, "kv_hash_blocks", q->req, ret);
	}
	while (pos < len) {
		size_t n = o->decode_chunk && o->decode_chunk < len - pos ?
			   o->decode_chunk : len - pos;
		uint64_t t0 = now_ns();

		ret = kv_seq_append(q->s, w->tok + (pos - tok_base), n);
		record(w, KVB_OP_APPEND, now_ns() - t0, 1);
		if (ret == -ENOSPC) {
			/*
			 * Nothing of ours left to close, and others hold the
			 * rest (maybe waiting for room too): give way.
			 */
			if (!w->nlive && stuck &&
			    now_ns() - stuck > KVB_PREEMPT_NS)
				return -EAGAIN;
			if (make_room(w, &stuck, &tries))
				return -1;
			continue;
		}
		fed(w);
		if (ret < 0)
			return seq_failed(w, "kv_seq_append", q->req, ret);
		pos += n;
		/* Written before the next append commits them. */
		if (stamp_range(w, q, &done, pos / bt))
			return -1;
	}
	return 0;
}

/* Sample the namespace's blocks in use and the waste at this moment. */
static void replay_sample(struct worker *w)
{
	unsigned bt = w->o->geom.block_tokens;
	struct kv_stats st;
	int64_t unused;

	if (kv_stats(w->c, &st))
		return;
	unused = atomic_load_explicit(&w->ms->unused_slots,
				      memory_order_relaxed);
	if (!st.ns_blocks_used)
		return;
	if (st.ns_blocks_used > w->r.peak_used) {
		w->r.peak_used = st.ns_blocks_used;
		w->r.peak_unused = unused;
	}
	w->r.waste_sum += (double)unused / ((double)st.ns_blocks_used * bt);
	w->r.waste_samples++;
}

static void wait_arrival(struct worker *w, size_t i)
{
	uint64_t t = w->o->tr->reqs[i].t_us - w->t_base_us;
	uint64_t at = w->t_go + (uint64_t)((double)t * 1e3 * w->o->ts_scale);
	struct timespec ts = {
		.tv_sec = (time_t)(at / NSEC_PER_SEC),
		.tv_nsec = (long)(at % NSEC_PER_SEC),
	};

	while (now_ns() < at &&
	       clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/*
 * Open @q's prompt (prefix lookup + allocation, one round trip), check
 * the stamps of the blocks that hit, stamp the rest, commit them.
 * *@hit: the tokens that hit. On failure @q is closed.
 */
static int replay_prompt(struct worker *w, struct rseq *q, size_t np,
			 size_t tok_base, size_t *hit)
{
	const struct opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[q->req];
	unsigned bt = o->geom.block_tokens;
	const kv_block_t *tab;
	uint64_t stuck = 0, t0;
	unsigned tries = 0;
	uint32_t nr = 0;
	size_t hb, done;
	int ret;

	for (;;) {
		t0 = now_ns();
		ret = kv_seq_open_hashes(w->c, w->hash, np,
					 w->tok + (np * bt - tok_base),
					 r->in_len - np * bt, &q->s);
		record(w, KVB_OP_OPEN, now_ns() - t0, 1);
		if (ret != -ENOSPC)
			break;
		if (make_room(w, &stuck, &tries))
			return -1;
	}
	fed(w);
	if (ret < 0)
		return seq_failed(w, "kv_seq_open_hashes", q->req, ret);
	*hit = kv_seq_hit_tokens(q->s);
	hb = *hit / bt < np ? *hit / bt : np;
	tab = kv_seq_block_table(q->s, &nr);
	for (size_t j = 0; j < hb && j < nr; j++)
		stamp_check(w, tab[j], &w->hash[j], q->req, j);
	done = hb;
	if (stamp_range(w, q, &done, np))
		goto err_close;
	t0 = now_ns();
	ret = kv_seq_commit(q->s);
	record(w, KVB_OP_COMMIT, now_ns() - t0, 1);
	if (ret < 0) {
		seq_failed(w, "kv_seq_commit", q->req, ret);
		goto err_close;
	}
	return 0;

err_close:
	kv_seq_close(q->s);
	q->s = NULL;
	return -1;
}

/*
 * Preempted (no room to grow, nothing of ours to close): give the blocks
 * back and open the prompt again after a pause, as an engine that
 * recomputes a preempted request does. Its committed blocks may still
 * be cached; its hits count only from the first, in-order open.
 */
static int replay_preempt(struct worker *w, struct rseq *q, size_t np,
			  size_t tok_base, unsigned n)
{
	struct timespec ts = { 0, 1000000L * (w->idx + 1) };
	size_t hit;

	kv_seq_close(q->s);
	q->s = NULL;
	fed(w);
	w->r.preempted++;
	if (n >= KVB_MAX_PREEMPT) {
		fprintf(stderr, "kvbench: proc %u: request %zu preempted %u times; is the pool too small for %u processes?\n",
			w->idx, q->req, n, w->o->procs);
		return -1;
	}
	nanosleep(&ts, NULL);
	return replay_prompt(w, q, np, tok_base, &hit);
}

/*
 * One request. While it is built it sits in the slot after the live
 * ones, seq_at(nlive), and is not live yet: -ENOSPC closes older
 * requests only (closing the oldest moves head and nlive together, so
 * that slot stays where it is). It joins the live window once its
 * output is appended.
 */
static int replay_one(struct worker *w, size_t i)
{
	const struct opts *o = w->o;
	const struct kvb_treq *r = &o->tr->reqs[i];
	unsigned bt = o->geom.block_tokens;
	size_t np = 0, tok_base = 0, hit = 0;
	struct rseq *q;
	uint32_t nr = 0;
	uint64_t t0;
	int ret = 0;

	if (o->timestamps)
		wait_arrival(w, i);
	if (w->nlive == o->live && seq_close(w, false))
		return -1;
	q = seq_at(w, w->nlive);
	q->req = i;
	if (replay_hash(w, i, &np, &tok_base))
		return -1;
	if (turn_wait(w, i))
		return -1;
	q->span = &w->spans[w->nr_spans];
	q->span->req = (uint32_t)i;
	q->span->t_open = now_ns();
	if (replay_prompt(w, q, np, tok_base, &hit))
		return -1;
	turn_pass(w, i);
	for (unsigned n = 0; r->out_len; n++) {
		ret = replay_output(w, q, np, tok_base);
		if (ret != -EAGAIN)
			break;
		if (replay_preempt(w, q, np, tok_base, n))
			return -1;
	}
	if (ret)
		goto err_close;
	if (r->out_len) {
		t0 = now_ns();
		ret = kv_seq_commit(q->s);
		record(w, KVB_OP_COMMIT, now_ns() - t0, 1);
		if (ret < 0) {
			seq_failed(w, "kv_seq_commit", i, ret);
			goto err_close;
		}
	}
	kv_seq_block_table(q->s, &nr);
	q->unused = (int64_t)nr * bt - (int64_t)kv_seq_len(q->s);
	atomic_fetch_add_explicit(&w->ms->unused_slots, q->unused,
				  memory_order_relaxed);
	w->nr_spans++;
	w->nlive++;
	w->r.requests++;
	w->r.prompt_tokens += r->in_len;
	w->r.hit_tokens += hit;
	w->r.prompt_blocks += np;
	w->r.hit_blocks += hit / bt < np ? hit / bt : np;
	w->r.output_tokens += r->out_len;
	/* For the parent's time series. */
	atomic_fetch_add_explicit(&w->ms->prompt_blocks, np,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&w->ms->hit_blocks,
				  hit / bt < np ? hit / bt : np,
				  memory_order_relaxed);
	replay_sample(w);
	return 0;

err_close:
	kv_seq_close(q->s);
	q->s = NULL;
	return -1;
}

/* Close every open request: the end of a phase or of the run. */
static int replay_drain(struct worker *w)
{
	while (w->nlive)
		if (seq_close(w, false))
			return -1;
	return 0;
}

/*
 * Our model's requests are i with i % mprocs == rank, ours. With one
 * model the stream is one phase; with N, phase ph is model ph % N's
 * requests [c * P, (c + 1) * P), c = ph / N, P = --phase-requests: we
 * wait for each of our model's phases, replay our requests of it, close
 * them all, and say we are done.
 */
static int replay_run(struct worker *w)
{
	const struct opts *o = w->o;
	size_t nr = o->tr->nr, lo, hi, i;
	uint32_t ph;
	int ret = 0;

	for (ph = w->model; ph < o->phases; ph += o->models) {
		lo = (size_t)(ph / o->models) * o->phase_requests;
		hi = lo + o->phase_requests < nr ? lo + o->phase_requests : nr;
		if (phase_wait(w, ph))
			return -1;
		w->t_go = now_ns();
		w->t_base_us = lo ? o->tr->reqs[lo].t_us : 0;
		i = lo - lo % w->mprocs + w->rank;
		for (i = i < lo ? i + w->mprocs : i; i < hi; i += w->mprocs) {
			ret = replay_one(w, i);
			if (ret)
				break;
		}
		if (replay_drain(w))
			return -1;
		if (ret)
			return ret;
		phase_end(w, ph);
	}
	return 0;
}

static int replay_init(struct worker *w)
{
	const struct opts *o = w->o;
	const struct kvb_trace *tr = o->tr;
	size_t blocks = tr->max_total / o->geom.block_tokens + 2;
	uint64_t mine = 0, appends = 0;

	for (size_t i = w->rank; i < tr->nr; i += w->mprocs) {
		uint32_t out = tr->reqs[i].out_len, c = o->decode_chunk;

		mine++;
		if (out)
			appends += c ? (out + c - 1) / c : 1;
	}
	mine = mine ? mine : 1;
	w->spans = calloc(mine, sizeof(*w->spans));
	if (mine > KVB_MAX_SAMPLES)
		mine = KVB_MAX_SAMPLES;
	if (appends > KVB_MAX_SAMPLES)
		appends = KVB_MAX_SAMPLES;
	w->seqs = calloc(o->live, sizeof(*w->seqs));
	w->sub = malloc(blocks * sizeof(*w->sub));
	w->hash = malloc(blocks * sizeof(*w->hash));
	w->tok = malloc(((size_t)tr->max_total + 1) * sizeof(*w->tok));
	if (!w->seqs || !w->sub || !w->hash || !w->tok || !w->spans ||
	    samples_init(&w->s[KVB_OP_HASH], (uint32_t)mine) ||
	    samples_init(&w->s[KVB_OP_OPEN], (uint32_t)mine) ||
	    samples_init(&w->s[KVB_OP_COMMIT], (uint32_t)(2 * mine)) ||
	    samples_init(&w->s[KVB_OP_APPEND], (uint32_t)appends) ||
	    samples_init(&w->s[KVB_OP_CLOSE], (uint32_t)mine))
		return -ENOMEM;
	return 0;
}

static int worker_init(struct worker *w, const struct opts *o, unsigned idx)
{
	struct kv_pool_info info;
	char who[32];

	memset(w, 0, sizeof(*w));
	w->o = o;
	w->idx = idx;
	w->model = idx % o->models;
	w->rank = idx / o->models;
	w->mprocs = o->mdl[w->model].procs;
	w->ms = o->sh ? &o->sh->m[w->model] : NULL;
	w->rng = splitmix64(o->seed) ^ splitmix64(idx + 1);
	w->res_rng = ~w->rng;
	w->gen_base = splitmix64(o->seed ^ 0x6b76626eULL);
	w->r.magic = KVB_RESULT_MAGIC;
	if ((o->mode == KVB_MODE_REPLAY ? replay_init(w) : alloc_init(w))) {
		fprintf(stderr, "kvbench: proc %u: out of memory\n", idx);
		return -ENOMEM;
	}
	snprintf(who, sizeof(who), "proc %u", idx);
	if (connect_kvd(o, w->model, &w->c, who))
		return -1;
	kv_pool_info(w->c, &info);
	/* Device memory is not the CPU's to write: books only on cuda. */
	w->words = info.backend == KV_BACKEND_CUDA || o->no_verify ? 0 :
		   info.block_bytes / sizeof(uint64_t);
	return 0;
}

/* ---- time series (the parent, through kvd's admin socket) ---- */

/*
 * KV_ADMIN_STATUS into a->reply, checked: the header in *@st, the number
 * of struct kv_admin_ns records after it (-errno on failure).
 */
static int admin_status(const struct opts *o, struct agg *a,
			struct kv_admin_status *st)
{
	ssize_t n = kv_admin_call(o->admin_path, KV_ADMIN_STATUS, 0, 0, a->reply);

	if (n < 0)
		return (int)n;
	if ((size_t)n < sizeof(*st))
		return -EPROTO;
	memcpy(st, a->reply, sizeof(*st));
	if (st->magic != KV_MAGIC || st->type != KV_MSG_ADMIN_REPLY)
		return -EPROTO;
	if (st->status < 0)
		return st->status;
	if (st->nr_records > KV_ADMIN_MAX_RECORDS ||
	    (size_t)n < sizeof(*st) +
			st->nr_records * sizeof(struct kv_admin_ns))
		return -EPROTO;
	return (int)st->nr_records;
}

/* Namespace @ns_id's record in a STATUS reply of @n records, or NULL. */
static const struct kv_admin_ns *admin_ns(const struct agg *a, int n,
					  uint32_t ns_id)
{
	const struct kv_admin_ns *r = (const void *)((const char *)a->reply +
				      sizeof(struct kv_admin_status));

	for (int i = 0; i < n; i++)
		if (r[i].id == ns_id)
			return &r[i];
	return NULL;
}

static void series_free(struct kvb_series *ts)
{
	free(ts->pt);
	free(ts->ns);
	memset(ts, 0, sizeof(*ts));
}

/* Room for one more point; false when there is none (said once). */
static bool series_room(struct kvb_series *ts, unsigned models)
{
	size_t cap = ts->cap ? 2 * ts->cap : 256;
	struct kvb_nspoint *ns;
	struct kvb_point *pt;

	if (ts->nr < ts->cap)
		return true;
	if (ts->nr >= KVB_MAX_POINTS) {
		if (!ts->full)
			fprintf(stderr, "kvbench: %u samples taken; the time series stops here (use a larger --sample-ms)\n",
				KVB_MAX_POINTS);
		ts->full = true;
		return false;
	}
	pt = realloc(ts->pt, cap * sizeof(*pt));
	if (pt)
		ts->pt = pt;
	ns = realloc(ts->ns, cap * models * sizeof(*ns));
	if (ns)
		ts->ns = ns;
	if (!pt || !ns) {
		if (!ts->full)
			fprintf(stderr, "kvbench: out of memory for the time series; it stops here\n");
		ts->full = true;
		return false;
	}
	ts->cap = cap;
	return true;
}

/*
 * One point: the pool and each model's namespace from KV_ADMIN_STATUS
 * (its header also in *@out when not NULL), the phase and the models'
 * counts so far from the shared books. 0 or -errno.
 */
static int sample_take(const struct opts *o, struct agg *a,
		       struct kv_admin_status *out)
{
	struct kvb_series *ts = &a->ts;
	struct kv_admin_status st;
	struct kvb_nspoint *np;
	struct kvb_point *p;
	int n;

	n = admin_status(o, a, &st);
	if (n < 0) {
		if (!ts->failed)
			fprintf(stderr, "kvbench: admin socket %s: %s; the time series misses samples\n",
				o->admin_path, strerror(-n));
		ts->failed = true;
		return n;
	}
	if (out)
		*out = st;
	if (!series_room(ts, o->models))
		return 0;
	p = &ts->pt[ts->nr];
	np = &ts->ns[ts->nr * o->models];
	p->t_ns = now_ns() - a->t_go;
	p->phase = atomic_load_explicit(&o->sh->phase, memory_order_relaxed);
	p->pool_used = st.pages_used;
	for (unsigned m = 0; m < o->models; m++) {
		const struct kv_admin_ns *r = admin_ns(a, n, a->info[m].ns_id);
		struct kvb_mshared *ms = &o->sh->m[m];

		memset(&np[m], 0, sizeof(np[m]));
		if (r) {
			np[m].pages = r->pages;
			np[m].used = r->blocks_used;
			np[m].cached = r->cached_blocks;
		}
		np[m].prompt_blocks = atomic_load_explicit(&ms->prompt_blocks,
							   memory_order_relaxed);
		np[m].hit_blocks = atomic_load_explicit(&ms->hit_blocks,
							memory_order_relaxed);
	}
	ts->nr++;
	return 0;
}

/*
 * Before the run (monitors connected, nothing started): the first point
 * and kvd's pool-wide counters (reclaims).
 */
static int series_begin(const struct opts *o, struct agg *a)
{
	a->t_go = now_ns();
	return sample_take(o, a, &a->st0) ? -1 : 0;
}

/* After the run (monitors still connected): the last point, counters. */
static void series_end(const struct opts *o, struct agg *a)
{
	a->have_st1 = !sample_take(o, a, &a->st1);
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
	for (int k = 0; k < KVB_NR_OPS; k++)
		w->r.op[k].nr = w->s[k].nr;
	w->r.nr_spans = w->nr_spans;
	if (write_full(fd, &w->r, sizeof(w->r)))
		return -1;
	for (int k = 0; k < KVB_NR_OPS; k++)
		if (write_full(fd, w->s[k].v, w->s[k].nr * sizeof(uint64_t)))
			return -1;
	if (write_full(fd, w->spans, w->nr_spans * sizeof(*w->spans)))
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
	w.r.t_start_ns = w.t_go = now_ns();
	w.r.syscalls = kv_syscalls(w.c);
	ret = o->mode == KVB_MODE_REPLAY ? replay_run(&w) : alloc_run(&w);
	w.r.t_end_ns = now_ns();
	w.r.syscalls = kv_syscalls(w.c) - w.r.syscalls;
	if (ret && o->sh && !w.stopped)
		turns_stop(o->sh);
	w.r.status = w.stopped ? KVB_STATUS_STOPPED : ret ? 1 : 0;
	kv_disconnect(w.c);
	if (send_result(&w, out_fd))
		_exit(1);
	_exit(ret && !w.stopped ? 1 : 0);
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
	for (int k = 0; k < KVB_NR_OPS; k++) {
		ch->samp[k] = malloc(((size_t)r.op[k].nr + 1) *
				     sizeof(uint64_t));
		if (!ch->samp[k]) {
			fprintf(stderr, "kvbench: out of memory for proc %u's samples\n",
				idx);
			return;
		}
		if (read_full(ch->fd, ch->samp[k],
			      r.op[k].nr * sizeof(uint64_t)))
			return;
	}
	ch->spans = malloc(((size_t)r.nr_spans + 1) * sizeof(*ch->spans));
	if (!ch->spans ||
	    read_full(ch->fd, ch->spans, r.nr_spans * sizeof(*ch->spans)))
		return;
	ch->r = r;
	ch->got = true;
}

/* Milliseconds until the next sample is due (taking it when it is). */
static int sample_due(const struct opts *o, struct agg *a, uint64_t *next)
{
	uint64_t period = (uint64_t)o->sample_ms * 1000000ULL, t = now_ns();

	if (!o->sample_ms)
		return -1;
	if (t >= *next) {
		sample_take(o, a, NULL);
		*next += period;
		t = now_ns();
		if (*next <= t)		/* fell behind: skip, not burst */
			*next = t + period;
	}
	return (int)((*next - t + 999999) / 1000000);
}

/*
 * Results in the order they come, samples every --sample-ms meanwhile.
 * A process that ends without results, or with a failure, stops the
 * others' replay (they may wait for its turn or phase).
 */
static void collect_all(const struct opts *o, struct agg *a,
			struct child *ch, unsigned n)
{
	uint64_t next = a->t_go + (uint64_t)o->sample_ms * 1000000ULL;
	struct pollfd pf[KVB_MAX_PROCS];
	unsigned left = n;

	for (unsigned i = 0; i < n; i++) {
		ch[i].started = true;
		pf[i] = (struct pollfd){ .fd = ch[i].fd, .events = POLLIN };
	}
	while (left) {
		if (poll(pf, n, sample_due(o, a, &next)) < 0) {
			if (errno == EINTR)
				continue;
			perror("kvbench: poll");
			break;
		}
		for (unsigned i = 0; i < n; i++) {
			if (pf[i].fd < 0 || !pf[i].revents)
				continue;
			collect(&ch[i], i);
			pf[i].fd = -1;
			left--;
			if (o->sh && (!ch[i].got || ch[i].r.status == 1))
				turns_stop(o->sh);
		}
	}
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
	if (!ch->started || ch->r.status == KVB_STATUS_STOPPED)
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
 * Replay: one more client, connected while the engines are, keeps the
 * namespace (and its prefix-cache counters) alive from before the run to
 * after it, so the counters' differences are this run's.
 */
static int monitor_begin(const struct opts *o, struct agg *a)
{
	int ret;

	for (unsigned m = 0; m < o->models; m++) {
		if (connect_kvd(o, m, &a->mon[m], "pool stats"))
			return -1;
		kv_pool_info(a->mon[m], &a->info[m]);
		ret = kv_stats(a->mon[m], &a->before[m]);
		if (ret) {
			fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
			return -1;
		}
	}
	return o->sample_ms ? series_begin(o, a) : 0;
}

/* --perf-stat: attach perf stat to kvd just before the start. */
static bool perf_begin(const struct opts *o, struct agg *a,
		       struct bench_perf *perf)
{
	struct kv_admin_status st;
	const char *why = "kvd's pid is unknown";
	int ret;

	if (!o->perf_stat)
		return false;
	ret = admin_status(o, a, &st);
	if (ret >= 0)
		ret = bench_perf_start(perf, (pid_t)st.pid, &why);
	if (!ret)
		return true;
	fprintf(stderr, "kvbench: --perf-stat: %s (%s); no kvd counts\n",
		why, strerror(-ret));
	return false;
}

/*
 * Fork all, wait until each is connected, start them together, collect.
 * Returns 0 when all ran fine, 1 when one failed, -1 when none started.
 */
static int run_children(const struct opts *o, struct child *ch,
			struct agg *a)
{
	unsigned started = 0, ready = 0;
	struct bench_perf perf;
	bool perf_on;
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
	if (ready == o->procs && o->mode == KVB_MODE_REPLAY &&
	    monitor_begin(o, a))
		ready = 0;
	if (!a->t_go)
		a->t_go = now_ns();
	perf_on = ready == o->procs && perf_begin(o, a, &perf);
	release_all(go[1], started, ready == o->procs ? 'g' : 'a');
	close(go[1]);
	if (ready == o->procs)
		collect_all(o, a, ch, started);
	if (perf_on)
		a->have_perf = !bench_perf_stop(&perf, &a->perf);
	if (ready == o->procs && o->sample_ms)
		series_end(o, a);
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

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

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
}

/* Sum counts, merge and sort samples (each process's sorted too). */
static int aggregate(struct agg *a, struct child *ch, unsigned n,
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
			qsort(ch[i].samp[k], r->op[k].nr, sizeof(uint64_t),
			      cmp_u64);
			memcpy(a->samp[k] + a->nsamp[k], ch[i].samp[k],
			       r->op[k].nr * sizeof(uint64_t));
			a->nsamp[k] += r->op[k].nr;
		}
	}
	for (int k = 0; k < KVB_NR_OPS; k++)
		qsort(a->samp[k], a->nsamp[k], sizeof(uint64_t), cmp_u64);
	return 0;
}

static void emit_geometry(struct kv_emit *e, const struct opts *o,
			  const struct agg *a)
{
	kv_emit_str(e, "model", "model", o->model);
	kv_emit_u64(e, "layers", "layers", o->geom.layers);
	kv_emit_u64(e, "kv_heads", "kv heads", o->geom.kv_heads);
	kv_emit_u64(e, "head_dim", "head dim", o->geom.head_dim);
	kv_emit_u64(e, "block_tokens", "block tokens", o->geom.block_tokens);
	kv_emit_str(e, "dtype", "dtype", o->dtype_name);
	kv_emit_str(e, "quant", "scales", quant_name(o->geom.quant));
	kv_emit_u64(e, "block_bytes", "block bytes", a->info[0].block_bytes);
	/* what the pool holds in this geometry, as kvd counts it */
	kv_emit_u64(e, "pool_tokens", "tokens the pool holds",
		    (uint64_t)a->info[0].max_blocks * o->geom.block_tokens);
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
	emit_geometry(e, o, a);
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
		"kvd system calls per op", "kvd page faults per op",
		"kvd context switches per op",
	};

	for (int k = 0; k < BENCH_PERF_NR; k++)
		if (c->have[k])
			kv_emit_f64(e, key[k], label[k],
				    ops ? (double)c->v[k] / (double)ops : 0);
}

static void emit_results(struct kv_emit *e, const struct opts *o,
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
	kv_emit_f64(e, "wall_s", "wall time (s)", (double)wall / 1e9);
	kv_emit_f64(e, "ops_per_s", "ops/s", per_s(ops, wall));
	/* -ENOSPC answers are cheap ops: this one counts only done work. */
	kv_emit_f64(e, "requests_per_s", "requests/s",
		    per_s(s->requests, wall));
	kv_emit_f64(e, "blocks_per_s", "blocks/s", per_s(s->blocks, wall));
	/*
	 * One process submitting batches: kvd serves only between a
	 * batch's submit and its last CQE, so blocks over that time is
	 * what kvd's one core does, however slow the client is between
	 * batches (pattern work, bookkeeping).
	 */
	if (o->procs == 1 && o->batch > 1 && s->serve_ns)
		kv_emit_f64(e, "serve_blocks_per_s",
			    "blocks/s while kvd serves",
			    per_s(s->blocks, s->serve_ns));
	/* the ring's promise: no system call per op while both are busy */
	kv_emit_f64(e, "syscalls_per_op", "client system calls per op",
		    ops ? (double)s->syscalls / (double)ops : 0);
	if (a->have_perf)
		emit_perf(e, &a->perf, ops);
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

static void emit_op_latency(struct kv_emit *e, const struct agg *a,
			    enum kvb_op k)
{
	const struct kvb_opstat *st = &a->sum.op[k];
	const uint64_t *v = a->samp[k];
	uint64_t n = a->nsamp[k];

	kv_emit_obj_begin(e, op_key[k], op_label[k]);
	kv_emit_f64(e, "p50", "p50", pct_us(v, n, 50));
	kv_emit_f64(e, "p99", "p99", pct_us(v, n, 99));
	kv_emit_f64(e, "mean", "mean", st->ops ?
		    (double)st->sum_ns / st->ops / 1e3 : 0);
	kv_emit_f64(e, "max", "max", (double)st->max_ns / 1e3);
	kv_emit_u64(e, "samples", "samples", n);
	kv_emit_obj_end(e);
}

static void emit_latency(struct kv_emit *e, const struct opts *o,
			 const struct agg *a)
{
	kv_emit_obj_begin(e, "latency_us", "latency (us)");
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
	kv_emit_u64(e, "pool_bytes", "pool bytes", st->pool_bytes);
	kv_emit_u64(e, "nr_pages", "pages", st->nr_pages);
	kv_emit_u64(e, "max_blocks", "max blocks", a->info[0].max_blocks);
	kv_emit_u64(e, "pages_used_before", "pages used before",
		    a->before[0].pages_used);
	kv_emit_u64(e, "peak_pages_used", "peak pages used",
		    st->peak_pages_used);
	kv_emit_u64(e, "peak_bytes", "peak bytes used", peak);
	kv_emit_f64(e, "peak_pct", "peak use (%)", st->nr_pages ?
		    100.0 * st->peak_pages_used / st->nr_pages : 0);
	kv_emit_str(e, "peak_scope", "peak scope",
		    a->after[0].peak_pages_used > a->before[0].peak_pages_used ?
		    "this run (kvd's peak since start, raised by it)" :
		    "kvd's peak since start (not exceeded by this run)");
	if (a->have_st1)
		kv_emit_u64(e, "reclaims", "blocks reclaimed by another namespace",
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

static const struct kv_emit_col replay_cols[] = {
	{ "proc",		"proc",		4 },
	{ "pid",		"pid",		8 },
	{ "requests",		"requests",	8 },
	{ "requests_per_s",	"req/s",	9 },
	{ "hit_ratio_blocks",	"hit blocks",	10 },
	{ "open_p50_us",	"open p50us",	10 },
	{ "open_p99_us",	"open p99us",	10 },
	{ "append_p50_us",	"app p50us",	9 },
	{ "close_p50_us",	"close p50us",	11 },
	{ "forced",		"forced",	7 },
	{ "stamp_errors",	"errors",	6 },
	{ "status",		"status",	6 },
};

static const char *proc_status(const struct child *ch)
{
	char why[96];

	return ch->r.bad_blocks || child_failure(ch, why, sizeof(why)) ?
	       "FAIL" : "ok";
}

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
		kv_emit_cell_str(e, proc_status(&ch[i]));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static const struct kv_emit_col replay_model_col = { "model", "model", 5 };

/* With --models, a model column after pid. */
static void emit_replay_procs(struct kv_emit *e, const struct opts *o,
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
		kv_emit_cell_str(e, proc_status(&ch[i]));
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static void emit_replay_config(struct kv_emit *e, const struct opts *o,
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
	kv_emit_u64(e, "decode_chunk", "decode chunk (tokens)",
		    o->decode_chunk);
	kv_emit_f64(e, "timestamps", "timestamps (scale; 0 off)",
		    o->timestamps ? o->ts_scale : 0);
	/* A string: JSON numbers lose u64 precision in most readers. */
	kv_emit_str(e, "salt", "hash salt", salt);
	emit_geometry(e, o, a);
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

static void emit_trace(struct kv_emit *e, const struct opts *o)
{
	const struct kvb_trace *tr = o->tr;

	kv_emit_obj_begin(e, "trace", "trace");
	kv_emit_u64(e, "requests", "requests", tr->nr);
	kv_emit_f64(e, "span_s", "span (s)", (double)tr->span_us / 1e6);
	kv_emit_u64(e, "prompt_tokens", "prompt tokens", tr->sum_in);
	kv_emit_u64(e, "output_tokens", "output tokens", tr->sum_out);
	kv_emit_u64(e, "max_prompt", "longest prompt", tr->max_in);
	kv_emit_u64(e, "max_output", "longest output", tr->max_out);
	kv_emit_obj_end(e);
}

/* A u64 counter of struct kv_stats at @off: over the run, all models. */
static uint64_t kvd_delta(const struct opts *o, const struct agg *a,
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

static void emit_replay_results(struct kv_emit *e, const struct opts *o,
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
	kv_emit_f64(e, "wall_s", "wall time (s)", (double)wall / 1e9);
	kv_emit_f64(e, "requests_per_s", "requests/s",
		    per_s(s->requests, wall));
	kv_emit_u64(e, "prompt_tokens", "prompt tokens", s->prompt_tokens);
	kv_emit_u64(e, "hit_tokens", "hit tokens", s->hit_tokens);
	kv_emit_f64(e, "hit_ratio_tokens", "hit ratio (tokens)",
		    ratio(s->hit_tokens, s->prompt_tokens));
	kv_emit_f64(e, "bound_tokens", "bound (tokens)",
		    ratio(b->hits * bt, b->prompt_tokens));
	kv_emit_u64(e, "prompt_blocks", "prompt full blocks", s->prompt_blocks);
	kv_emit_u64(e, "hit_blocks", "hit blocks", s->hit_blocks);
	kv_emit_f64(e, "hit_ratio_blocks", "hit ratio (blocks)", hit);
	kv_emit_f64(e, "bound_blocks", "bound (blocks)", bound);
	kv_emit_f64(e, "bound_gap", "bound - hit ratio", bound - hit);
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

static void emit_bound(struct kv_emit *e, const struct agg *a)
{
	const struct kvb_bound *b = &a->bound;

	kv_emit_obj_begin(e, "bound", "infinite cache (offline)");
	kv_emit_f64(e, "hit_ratio_blocks", "hit ratio (blocks)",
		    ratio(b->hits, b->refs));
	kv_emit_u64(e, "refs", "prompt block references", b->refs);
	kv_emit_u64(e, "unique", "distinct prompt blocks", b->unique);
	kv_emit_u64(e, "footprint_blocks", "blocks committed in all",
		    b->footprint);
	kv_emit_obj_end(e);
}

static void emit_memory(struct kv_emit *e, const struct opts *o,
			const struct agg *a)
{
	const struct kvb_result *s = &a->sum;
	uint64_t slots = s->peak_used * o->geom.block_tokens;

	kv_emit_obj_begin(e, "memory", "memory");
	kv_emit_u64(e, "peak_blocks_used", "peak blocks in use",
		    s->peak_used);
	kv_emit_u64(e, "peak_bytes_used", "peak bytes in use",
		    s->peak_used * a->info[0].block_bytes);
	kv_emit_f64(e, "waste_at_peak_pct", "waste at peak (%)",
		    slots ? 100.0 * (double)s->peak_unused / (double)slots : 0);
	kv_emit_f64(e, "waste_mean_pct", "waste, mean (%)",
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
	kv_emit_u64(e, "static_bytes", "static (max len)",
		    m->static_slots * tb);
	kv_emit_u64(e, "chunked_bytes", "chunked (256 tokens)",
		    m->chunked_slots * tb);
	kv_emit_u64(e, "paged_bytes", "paged, no sharing",
		    m->paged_slots * tb);
	kv_emit_u64(e, "paged_shared_bytes", "paged + sharing (ideal)",
		    m->shared_slots * tb);
	kv_emit_obj_end(e);
}

static void emit_allocators(struct kv_emit *e, const struct opts *o,
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
	kv_emit_u64(e, "kvd_bytes", "kvd (measured)", kvd);
	kv_emit_str(e, "ratios_over", "ratios over",
		    a->have_run ? "as run" : "offline");
	kv_emit_f64(e, "static_vs_kvd", "static / kvd",
		    ratio(m->static_slots * tb, kvd));
	kv_emit_f64(e, "chunked_vs_kvd", "chunked / kvd",
		    ratio(m->chunked_slots * tb, kvd));
	kv_emit_f64(e, "paged_vs_kvd", "paged / kvd",
		    ratio(m->paged_slots * tb, kvd));
	kv_emit_f64(e, "kvd_vs_ideal", "kvd / ideal sharing",
		    ratio(kvd, m->shared_slots * tb));
	kv_emit_obj_end(e);
}

/* ---- report: time series and namespaces ---- */

#define KVB_SERIES_FIXED	4	/* t, phase, busy, pool */
#define KVB_SERIES_PER_NS	4	/* pages, used, cached, hit */

static const struct kv_emit_col series_fixed[KVB_SERIES_FIXED] = {
	{ "t_s",		"t (s)",	7 },
	{ "phase",		"phase",	5 },
	{ "busy",		"busy",		4 },
	{ "pool_pages_used",	"pool pg",	7 },
};

static const struct { const char *key, *header; int width; }
series_ns[KVB_SERIES_PER_NS] = {
	{ "pages",	"pages",	8 },
	{ "used",	"used",		7 },
	{ "cached",	"cached",	9 },
	{ "hit",	"hit",		6 },
};

/* Keys m<k>_pages ..., headers "m<k> pages" ... */
struct series_cols {
	struct kv_emit_col col[KVB_SERIES_FIXED +
			       KVB_MAX_MODELS * KVB_SERIES_PER_NS];
	char		key[KVB_MAX_MODELS * KVB_SERIES_PER_NS][24];
	char		header[KVB_MAX_MODELS * KVB_SERIES_PER_NS][24];
	int		nr;
};

static void series_cols_init(struct series_cols *c, unsigned models)
{
	int k = 0;

	memcpy(c->col, series_fixed, sizeof(series_fixed));
	c->nr = KVB_SERIES_FIXED;
	for (unsigned m = 0; m < models; m++) {
		for (int j = 0; j < KVB_SERIES_PER_NS; j++, k++) {
			snprintf(c->key[k], sizeof(c->key[k]), "m%u_%s", m,
				 series_ns[j].key);
			snprintf(c->header[k], sizeof(c->header[k]), "m%u %s",
				 m, series_ns[j].header);
			c->col[c->nr++] = (struct kv_emit_col){
				c->key[k], c->header[k], series_ns[j].width };
		}
	}
}

/*
 * One row per sample: time since the start, the phase and its busy
 * model, the pool's pages in use, and per namespace its pages, blocks in
 * use, cached blocks and its hit ratio so far (blocks).
 */
static void emit_series(struct kv_emit *e, const struct opts *o,
			const struct agg *a)
{
	const struct kvb_series *ts = &a->ts;
	struct series_cols c;
	char busy[16], label[96];

	series_cols_init(&c, o->models);
	snprintf(label, sizeof(label),
		 "time series (every %u ms; per model: pages, blocks in use, cached blocks, hit ratio so far)",
		 o->sample_ms);
	kv_emit_obj_begin(e, "time_series", label);
	kv_emit_table_begin(e, "samples", c.col, c.nr);
	for (size_t i = 0; i < ts->nr; i++) {
		const struct kvb_point *p = &ts->pt[i];
		const struct kvb_nspoint *np = &ts->ns[i * o->models];

		if (p->phase < o->phases)
			snprintf(busy, sizeof(busy), "m%u",
				 p->phase % o->models);
		else
			snprintf(busy, sizeof(busy), "-");
		kv_emit_row_begin(e);
		kv_emit_cell_f64(e, (double)p->t_ns / 1e9);
		kv_emit_cell_u64(e, p->phase < o->phases ? p->phase :
						     o->phases);
		kv_emit_cell_str(e, busy);
		kv_emit_cell_u64(e, p->pool_used);
		for (unsigned m = 0; m < o->models; m++) {
			kv_emit_cell_u64(e, np[m].pages);
			kv_emit_cell_u64(e, np[m].used);
			kv_emit_cell_u64(e, np[m].cached);
			kv_emit_cell_f64(e, ratio(np[m].hit_blocks,
						  np[m].prompt_blocks));
		}
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}

static const struct kv_emit_col ns_cols[] = {
	{ "m",			"m",		-2 },
	{ "model",		"model",	-14 },
	{ "ns",			"ns",		3 },
	{ "layers",		"layers",	6 },
	{ "block_bytes",	"block B",	8 },
	{ "procs",		"procs",	5 },
	{ "requests",		"requests",	8 },
	{ "hit_ratio_blocks",	"hit blocks",	10 },
	{ "hit_ratio_tokens",	"hit tokens",	10 },
	{ "bound_blocks",	"bound",	6 },
	{ "evictions",		"evictions",	9 },
	{ "pages_start",	"pg start",	8 },
	{ "pages_peak",		"pg peak",	7 },
	{ "pages_end",		"pg end",	6 },
	{ "pages_in",		"pg in",	6 },
	{ "pages_out",		"pg out",	6 },
	{ "peak_blocks_used",	"peak used",	9 },
};

/* Pages of model @m over the samples: first, peak, last, in, out. */
static void ns_pages(const struct opts *o, const struct agg *a, unsigned m,
		     uint64_t pg[5])
{
	const struct kvb_series *ts = &a->ts;

	memset(pg, 0, 5 * sizeof(pg[0]));
	for (size_t i = 0; i < ts->nr; i++) {
		uint32_t v = ts->ns[i * o->models + m].pages;

		if (!i)
			pg[0] = v;
		if (v > pg[1])
			pg[1] = v;
		if (i && v > pg[2])
			pg[3] += v - pg[2];
		else if (i)
			pg[4] += pg[2] - v;
		pg[2] = v;
	}
}

/* The per-namespace summary of the run. */
static void emit_namespaces(struct kv_emit *e, const struct opts *o,
			    const struct agg *a)
{
	double bound = ratio(a->bound.hits, a->bound.refs);
	char mdl[16];
	uint64_t pg[5];

	kv_emit_obj_begin(e, "namespaces",
			  "namespaces (pages from the samples; pg in/out: gained/lost between samples)");
	kv_emit_table_begin(e, "models", ns_cols,
			    sizeof(ns_cols) / sizeof(ns_cols[0]));
	for (unsigned m = 0; m < o->models; m++) {
		const struct kvb_result *r = &a->msum[m];

		ns_pages(o, a, m, pg);
		snprintf(mdl, sizeof(mdl), "m%u", m);
		kv_emit_row_begin(e);
		kv_emit_cell_str(e, mdl);
		kv_emit_cell_str(e, o->mdl[m].id);
		kv_emit_cell_u64(e, a->info[m].ns_id);
		kv_emit_cell_u64(e, o->mdl[m].geom.layers);
		kv_emit_cell_u64(e, a->info[m].block_bytes);
		kv_emit_cell_u64(e, o->mdl[m].procs);
		kv_emit_cell_u64(e, r->requests);
		kv_emit_cell_f64(e, ratio(r->hit_blocks, r->prompt_blocks));
		kv_emit_cell_f64(e, ratio(r->hit_tokens, r->prompt_tokens));
		kv_emit_cell_f64(e, bound);
		kv_emit_cell_u64(e, a->have_after ?
				 a->after[m].evictions - a->before[m].evictions :
				 0);
		for (int k = 0; k < 5; k++)
			kv_emit_cell_u64(e, pg[k]);
		kv_emit_cell_u64(e, r->peak_used);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
	kv_emit_obj_end(e);
}

static void report(FILE *f, bool json, const struct opts *o,
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
		emit_replay_config(&e, o, a);
		emit_trace(&e, o);
		emit_replay_results(&e, o, a);
		emit_bound(&e, a);
		if (o->sample_ms) {
			emit_series(&e, o, a);
			emit_namespaces(&e, o, a);
		}
		if (o->models == 1)
			emit_memory(&e, o, a);
		if (a->have_sim)
			emit_allocators(&e, o, a);
	} else {
		emit_config(&e, o, a);
		emit_results(&e, o, a);
	}
	emit_latency(&e, o, a);
	emit_pool(&e, a);
	kv_emit_obj_end(&e);
	if (o->mode == KVB_MODE_REPLAY)
		emit_replay_procs(&e, o, ch, o->procs);
	else
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

/* ---- replay set-up ---- */

static uint64_t random_salt(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) == sizeof(v))
		return v;
	return splitmix64(now_ns() ^ (uint64_t)getpid() << 32);
}

/* Read or make the request stream; what follows from it. */
static int replay_prepare(struct opts *o, struct kvb_trace *tr)
{
	unsigned bt = o->geom.block_tokens;
	uint64_t blocks, data;
	int ret;

	if (o->synthetic) {
		size_t n = o->limit ? o->limit :
			   (size_t)KVB_SYN_PER_PROC * o->procs;

		ret = kvb_trace_synthetic(tr, n, o->seed);
		if (ret) {
			fprintf(stderr, "kvbench: --synthetic: %s\n",
				strerror(-ret));
			return 1;
		}
	} else {
		if (o->trace_block % bt) {
			fprintf(stderr, "kvbench: --trace-block %u is not a multiple of --block-tokens %u\n",
				o->trace_block, bt);
			return 2;
		}
		if (kvb_trace_load(tr, o->trace_path, o->limit,
				   o->trace_block))
			return 2;
	}
	o->tr = tr;
	if (!o->salt_given)
		o->salt = random_salt();
	if (o->max_model_len && o->max_model_len < tr->max_total) {
		fprintf(stderr, "kvbench: --max-model-len %u is shorter than the longest request (%u tokens)\n",
			o->max_model_len, tr->max_total);
		return 2;
	}
	if (!o->max_model_len)
		o->max_model_len = tr->max_total;
	/* kv_seq keeps hashes, ids and commit entries in the data area. */
	blocks = tr->max_total / bt + 2;
	data = (blocks * (sizeof(struct kv_hash) + sizeof(kv_block_t) +
			  sizeof(struct kv_commit)) + 8191) & ~4095ULL;
	if (data > KV_MAX_DATA_BYTES) {
		fprintf(stderr, "kvbench: a %u-token request is %llu blocks of %u tokens; kvd's ring data area cannot hold its hashes (use larger --block-tokens)\n",
			tr->max_total, (unsigned long long)blocks, bt);
		return 2;
	}
	o->data_bytes = data > (256U << 10) ? (unsigned)data : 0;
	o->max_req_blocks = (uint32_t)(blocks - 1);
	o->sh = mmap(NULL, sizeof(*o->sh), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (o->sh == MAP_FAILED) {
		o->sh = NULL;
		perror("kvbench: mmap");
		return 1;
	}
	atomic_init(&o->sh->starved, 0);
	atomic_init(&o->sh->phase, 0);
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++) {
		struct kvb_mshared *ms = &o->sh->m[m];

		atomic_init(&ms->unused_slots, 0);
		atomic_init(&ms->next, 0);
		atomic_init(&ms->done, 0);
		atomic_init(&ms->prompt_blocks, 0);
		atomic_init(&ms->hit_blocks, 0);
	}
	/* One model: one phase. N: each model's stream in turns. */
	if (o->models == 1)
		o->phase_requests = tr->nr ? (unsigned)tr->nr : 1;
	else if (!o->phase_given)
		o->phase_requests = (unsigned)((tr->nr + 3) / 4);
	if (!o->phase_requests)
		o->phase_requests = 1;
	o->phases = o->models * (unsigned)((tr->nr + o->phase_requests - 1) /
					   o->phase_requests);
	return 0;
}

/* The offline figures: bound, and with --compare-allocators the sim. */
static int replay_analyse(const struct opts *o, struct agg *a)
{
	unsigned bt = o->geom.block_tokens;
	int ret;

	struct kvb_event *ev = NULL;
	size_t nev = 0;

	ret = kvb_trace_bound(o->tr, bt, &a->bound);
	if (!ret && o->compare)
		ret = kvb_sched_lockstep(o->tr->nr, o->procs, o->live, &ev,
					 &nev);
	if (!ret && o->compare) {
		a->sim.max_model_len = o->max_model_len;
		a->sim.chunk = KVB_CHUNK_TOKENS;
		ret = kvb_trace_alloc_sim(o->tr, bt, ev, nev, &a->sim);
		a->have_sim = !ret;
	}
	free(ev);
	if (ret)
		fprintf(stderr, "kvbench: offline analysis: %s\n",
			strerror(-ret));
	return ret ? 1 : 0;
}

static int cmp_event(const void *a, const void *b)
{
	const struct kvb_event *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->sign - y->sign;	/* leaving before arriving */
}

/* The allocators over the schedule the run really had. */
static void replay_as_run(const struct opts *o, struct agg *a,
			  const struct child *ch)
{
	struct kvb_event *ev;
	size_t n = 0, k = 0;
	int ret;

	for (unsigned i = 0; i < o->procs; i++)
		if (ch[i].got)
			n += ch[i].r.nr_spans;
	ev = malloc((2 * n + 1) * sizeof(*ev));
	if (!ev)
		return;
	for (unsigned i = 0; i < o->procs; i++) {
		for (uint32_t j = 0; ch[i].got && j < ch[i].r.nr_spans; j++) {
			const struct kvb_span *sp = &ch[i].spans[j];

			ev[k++] = (struct kvb_event){ sp->t_open, sp->req, 1 };
			ev[k++] = (struct kvb_event){
				sp->t_close ? sp->t_close : UINT64_MAX,
				sp->req, -1 };
		}
	}
	qsort(ev, k, sizeof(*ev), cmp_event);
	a->run.max_model_len = o->max_model_len;
	a->run.chunk = KVB_CHUNK_TOKENS;
	ret = kvb_trace_alloc_sim(o->tr, o->geom.block_tokens, ev, k, &a->run);
	a->have_run = !ret;
	if (ret)
		fprintf(stderr, "kvbench: allocators over the run's schedule: %s\n",
			strerror(-ret));
	free(ev);
}

/* ---- main ---- */

/* Connect once per model: kvd is there, takes it, and a request fits. */
static int probe_model(const struct opts *o, struct agg *a, unsigned m)
{
	struct kv_pool_info *info = &a->info[m];
	struct kv_client *c;
	int ret;

	if (connect_kvd(o, m, &c, "cannot use kvd"))
		return 1;
	kv_pool_info(c, info);
	if (info->backend == KV_BACKEND_CUDA && !m)
		fprintf(stderr, "kvbench: the pool is on GPU %d: block bytes are not written or verified (tests/gpu checks them on the device)\n",
			info->device);
	ret = kv_stats(c, &a->before[m]);
	kv_disconnect(c);
	if (ret) {
		fprintf(stderr, "kvbench: STATS: %s\n", strerror(-ret));
		return 1;
	}
	if (o->max_req_blocks > info->max_blocks) {
		if (o->mode == KVB_MODE_REPLAY)
			fprintf(stderr, "kvbench: the longest request (%u tokens) needs %u blocks; the pool holds only %u blocks of %llu bytes%s%s\n",
				o->tr->max_total, o->max_req_blocks,
				info->max_blocks,
				(unsigned long long)info->block_bytes,
				o->models > 1 ? " for model " : "",
				o->models > 1 ? o->mdl[m].id : "");
		else
			fprintf(stderr, "kvbench: --max-tokens %u needs %u-block requests; the pool holds only %u blocks of %llu bytes\n",
				o->max_tokens, o->max_req_blocks,
				info->max_blocks,
				(unsigned long long)info->block_bytes);
		return 2;
	}
	if (info->block_bytes % sizeof(uint64_t)) {
		fprintf(stderr, "kvbench: %llu-byte blocks: not a whole number of 64-bit words\n",
			(unsigned long long)info->block_bytes);
		return 1;
	}
	return 0;
}

/* Each model, and the admin socket when there are samples to take. */
static int probe(const struct opts *o, struct agg *a)
{
	struct kv_admin_status st;
	int ret;

	for (unsigned m = 0; m < o->models; m++) {
		ret = probe_model(o, a, m);
		if (ret)
			return ret;
	}
	if (!o->sample_ms && !o->perf_stat)
		return 0;
	a->reply = malloc(KV_ADMIN_REPLY_MAX);
	if (!a->reply) {
		fprintf(stderr, "kvbench: out of memory\n");
		return 1;
	}
	ret = admin_status(o, a, &st);
	if (ret < 0) {
		fprintf(stderr, "kvbench: admin socket %s: %s (the time series and --perf-stat need it; see --admin-socket)\n",
			o->admin_path, strerror(-ret));
		return 1;
	}
	return 0;
}

static int final_stats(const struct opts *o, struct agg *a)
{
	int ret = 0, err;

	for (unsigned m = 0; m < o->models; m++) {
		struct kv_client *c = a->mon[m];

		if (!c && connect_kvd(o, m, &c, "pool stats after the run")) {
			ret = -1;
			continue;
		}
		err = kv_stats(c, &a->after[m]);
		kv_disconnect(c);
		a->mon[m] = NULL;
		if (err) {
			fprintf(stderr, "kvbench: STATS: %s\n", strerror(-err));
			ret = -1;
		}
	}
	a->have_after = !ret;
	return ret;
}

/* Aggregate, report, and decide the exit status; closes @json. */
static int finish(const struct opts *o, struct agg *a, struct child *ch,
		  FILE *json, bool ok)
{
	if (aggregate(a, ch, o->procs, o->models)) {
		fprintf(stderr, "kvbench: out of memory for the samples\n");
		if (json)
			fclose(json);
		return 1;
	}
	if (final_stats(o, a))
		ok = false;
	if (o->mode == KVB_MODE_REPLAY && o->compare)
		replay_as_run(o, a, ch);
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
	struct kvb_trace tr = { 0 };
	struct child *ch = NULL;
	struct agg a = { 0 };
	struct bench_kvd pk = { 0 };
	FILE *json = NULL;
	struct opts o;
	int ret;

	/* The benchmarks (tools/bench_*.c) parse their own options. */
	ret = kvb_bench_main(argc, argv);
	if (ret >= 0)
		return ret;
	if (parse_args(&o, argc, argv)) {
		free(o.cmdline);
		return 2;
	}
	if (o.private_pool) {
		ret = bench_kvd_start(&pk, o.kvd_bin, o.private_pool) ? 1 : 0;
		if (ret)
			goto out;
		o.socket = pk.sock;
		if (!o.admin_socket)
			snprintf(o.admin_path, sizeof(o.admin_path), "%s",
				 pk.admin);
	}
	if (o.mode == KVB_MODE_REPLAY) {
		ret = replay_prepare(&o, &tr);
		if (ret)
			goto out;
	}
	ret = probe(&o, &a);
	if (ret)
		goto out;
	if (o.mode == KVB_MODE_REPLAY) {
		ret = replay_analyse(&o, &a);
		if (ret)
			goto out;
	}
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
	ret = run_children(&o, ch, &a);
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
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++)
		if (a.mon[m])
			kv_disconnect(a.mon[m]);
	free(a.reply);
	series_free(&a.ts);
	for (unsigned i = 0; ch && i < o.procs; i++) {
		for (int k = 0; k < KVB_NR_OPS; k++)
			free(ch[i].samp[k]);
		free(ch[i].spans);
	}
	free(ch);
	for (int k = 0; k < KVB_NR_OPS; k++)
		free(a.samp[k]);
	kvb_trace_free(&tr);
	if (o.sh)
		munmap(o.sh, sizeof(*o.sh));
	if (o.private_pool)
		bench_kvd_stop(&pk);
	free(o.cmdline);
	return ret;
}
