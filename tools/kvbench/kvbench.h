/* SPDX-License-Identifier: MIT */
/*
 * The engine of kvbench's two fleet modes (the alloc/release load and
 * the replay): what the engine processes share (kvb_shared, over an
 * anonymous mapping), what each sends its parent (kvb_result and its
 * samples, over a pipe), and what the parent adds them up into (agg)
 * for the report. See mode_load.c and mode_replay.c for the modes.
 */
#ifndef KVB_KVBENCH_H
#define KVB_KVBENCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <kv/kv.h>

#include "../admin.h"
#include "../trace.h"
#include "lat.h"
#include "opts.h"
#include "perf.h"

#define NSEC_PER_SEC		KVB_NSEC_PER_SEC
#define KVB_MAX_MSGS		16	/* mismatch lines per process */
#define KVB_MAX_SAMPLES		(1U << 20)	/* per op and process */
#define KVB_ENOSPC_GIVEUP_NS	(30 * NSEC_PER_SEC)
#define KVB_RESULT_MAGIC	0x5242564bU	/* "KVBR" */
/* Odd, so the words of one block never repeat. */
#define KVB_PATTERN_STEP	0x9e3779b97f4a7c15ULL
#define KVB_STAMP_BYTES		64	/* checked at each end of a block */
#define KVB_CHUNK_TOKENS	256	/* --compare-allocators: chunked unit */
#define KVB_SYN_PER_PROC	2000	/* --synthetic requests per process */
#define KVB_MAX_POINTS		(1U << 20)	/* time-series samples kept */
#define KVB_PHASE_POLL_NS	100000000L	/* re-check a phase wait */

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
	/* hit_blocks by where kvd found them (kv_seq_hits) */
	uint64_t	pool_hit_blocks;	/* already in the pool */
	uint64_t	host_hit_blocks;	/* brought back from the host tier */
	uint64_t	disk_hit_blocks;	/* from a disk tier */
};

/* When one replayed request was open, for the as-run schedule. */
struct kvb_span {
	uint64_t	t_open;		/* before its open */
	uint64_t	t_close;	/* after its close */
	uint32_t	req;
	uint32_t	resv;
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

/*
 * --compare-tier: the figures of the first run (pool only), for the
 * report of the second (the same pool, a host tier behind it).
 */
struct kvb_tier_base {
	bool		have;		/* the first run reported */
	bool		ok;		/* and ended ok */
	struct kvb_result sum;
	uint64_t	evictions;	/* kvd's, over the run */
	uint64_t	wall_ns;
};

/* What fio said, beside the promotion pass (fio.c). */
enum kvb_fio_state {
	KVB_FIO_SKIPPED,	/* --no-fio, or no pass to compare with */
	KVB_FIO_ABSENT,		/* not installed: said, not a failure */
	KVB_FIO_FAILED,		/* ran, or could not: why in fio_why */
	KVB_FIO_OK,
};

/*
 * --disk-tier-size: the promotion pass after the replay (promote.c)
 * and fio's sequential read on the disk tier's file system (fio.c).
 */
struct kvb_promo {
	bool		ran;		/* the pass ran to its end */
	uint64_t	requests;	/* prompts looked up */
	uint64_t	hit_blocks;	/* LOOKUP hits, all tiers */
	uint64_t	host_blocks;	/* of them, the host tier's (CQE) */
	uint64_t	disk_blocks;	/* of them, the disk tier's (CQE) */
	uint64_t	disk_lookups;	/* LOOKUPs with disk hits */
	uint64_t	promotions;	/* the disk tier's count over the pass */
	uint64_t	wall_ns;	/* first LOOKUP to last CQE */
	uint64_t	busy_ns;	/* union of the disk-hit LOOKUPs */
	uint64_t	block_bytes;	/* kvd's block */
	uint64_t	read_bytes;	/* what kvd reads per block: its run */
	unsigned	depth;		/* reads kvd's staging holds at once */
	struct kv_admin_tier disk;	/* the disk tier after the pass */
	bool		have_disk;
	/* fio */
	enum kvb_fio_state fio;
	char		fio_why[160];
	char		fio_dir[KVB_PATH_MAX];
	uint64_t	fio_bs;		/* read_bytes, as kvd reads */
	uint64_t	fio_size;
	double		fio_bw;		/* bytes/s at fio_bs */
	double		fio_bw_1m;	/* bytes/s at 1 MiB */
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
	/* --host-tier-size: the private kvd's tier, after the run */
	struct kv_admin_tier tier;
	bool		have_tier;
	/* --disk-tier-size: its disk tier, after the run; the pass */
	struct kv_admin_tier disk_tier;
	bool		have_disk_tier;
	struct kvb_promo promo;
};

/* The figures of the reports. */
static inline double pct_us(const uint64_t *v, uint64_t n, unsigned p)
{
	return kvb_pct(v, n, p) / 1e3;
}

static inline double per_s(uint64_t count, uint64_t ns)
{
	return ns ? (double)count * 1e9 / (double)ns : 0;
}

static inline double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

static inline uint64_t now_ns(void)
{
	return bench_now_ns();
}

static inline uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static inline uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return splitmix64(*s);
}

#endif /* KVB_KVBENCH_H */
