// SPDX-License-Identifier: MIT
/*
 * kvbench --trace FILE / --synthetic: the replay mode. The parent reads
 * (tools/trace.c) or makes the request stream, sizes the rings from its
 * longest request, maps what the processes share, and splits the stream
 * into the models' phases; run.c runs the fleet, replay.c is one process.
 *
 * With --models N (N >= 2) the processes serve N models, process i model
 * i % N, each model a namespace of its own geometry (model k: k + 1
 * times --layers), and every model replays the whole stream, in phases
 * of --phase-requests requests that take turns: model 0 replays its
 * first phase while the others idle, then model 1 its first, ..., then
 * model 0 its second. A model's processes close all their requests at
 * the end of its phase, so what it keeps is cached blocks, which kvd may
 * reclaim for the busy model (elastic sharing). Meanwhile the parent
 * samples kvd's admin socket every --sample-ms (series.c).
 *
 * With --compare-tier the stream is replayed twice on private kvds of
 * the same pool, without any tier, then with --host-tier-size (and
 * --disk-tier-size below it, when given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "modes.h"
#include "run.h"

static uint64_t random_salt(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) == sizeof(v))
		return v;
	return splitmix64(now_ns() ^ (uint64_t)getpid() << 32);
}

/* What the processes share, as a run starts (no process runs now). */
static void shared_reset(struct kvb_shared *sh)
{
	atomic_init(&sh->starved, 0);
	atomic_init(&sh->phase, 0);
	for (unsigned m = 0; m < KVB_MAX_MODELS; m++) {
		struct kvb_mshared *ms = &sh->m[m];

		atomic_init(&ms->unused_slots, 0);
		atomic_init(&ms->next, 0);
		atomic_init(&ms->done, 0);
		atomic_init(&ms->prompt_blocks, 0);
		atomic_init(&ms->hit_blocks, 0);
	}
}

/* Read or make the request stream; what follows from it. */
static int replay_prepare(struct kvb_opts *o, struct kvb_trace *tr)
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
	shared_reset(o->sh);
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

/*
 * --compare-tier: the same stream (same salt, so the same hashes) twice,
 * each on a private kvd of its own with the same pool: first without
 * any tier, then with the host tier (and the disk tier, if given),
 * whose report (and --json) sets the two side by side
 * (report_replay.c). The second runs only if the first ran to its
 * report.
 */
static int replay_compare_tier(struct kvb_opts *o)
{
	struct kvb_tier_base base = { 0 };
	const char *tier = o->host_tier, *disk = o->disk_tier;
	const char *json = o->json_path;
	int ret, ret2;

	o->tier_base = &base;
	o->host_tier = NULL;
	o->disk_tier = NULL;
	o->json_path = NULL;	/* the second run's report has both */
	ret = kvb_fleet_run(o);
	o->host_tier = tier;
	o->disk_tier = disk;
	o->json_path = json;
	if (!base.have) {
		fprintf(stderr, "kvbench: --compare-tier: the run without the tiers did not finish; the run with them is not started\n");
		o->tier_base = NULL;
		return ret ? ret : 1;
	}
	shared_reset(o->sh);
	ret2 = kvb_fleet_run(o);
	o->tier_base = NULL;
	return ret2 > ret ? ret2 : ret;
}

int kvb_mode_replay(struct kvb_opts *o)
{
	struct kvb_trace tr = { 0 };
	int ret;

	ret = replay_prepare(o, &tr);
	if (!ret && o->compare_tier)
		ret = replay_compare_tier(o);
	else if (!ret)
		ret = kvb_fleet_run(o);
	kvb_trace_free(&tr);
	if (o->sh)
		munmap(o->sh, sizeof(*o->sh));
	return ret;
}
