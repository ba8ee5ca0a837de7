// SPDX-License-Identifier: MIT
/*
 * kvbench: load kvd from several engine processes, replay request
 * streams through its prefix cache, and benchmark it against floors and
 * other stores. One mode per run, from one table: the option that
 * selects a mode, the option groups it takes (opts.h), and the function
 * that runs it (one file each, mode_*.c). The one parser (opts.c) picks
 * the entry and refuses the options it does not take.
 *
 *   (default)        alloc/release load with verified block patterns
 *   --trace, --synthetic   replay through kv_seq, hit ratio vs bound
 *   --workload FILE  a kvdtrc block-manager workload, median of --runs
 *   --floor          round-trip floors and kvd's round trips vs them
 *   --hash-bench     kv_hash_blocks vs XXH3 and SHA-256
 *   --redis          32-key MGET vs kvd's 32-block LOOKUP
 *   --bench-summary DIR   one table from DIR/bench-*.json
 *   --policy POLICY  long generation past max_context under context
 *                    policies, their peak memory compared
 */
#include <stdlib.h>

#include "modes.h"

#define OG_ENGINE	(KVB_OG_JSON | KVB_OG_KVD | KVB_OG_FLEET)
#define OG_ON_KVD	(KVB_OG_JSON | KVB_OG_KVD)

static const struct kvb_mode_def kvb_modes[KVB_NR_MODES] = {
	[KVB_MODE_ALLOC] = {
		.name	= "the alloc/release benchmark",
		.opts	= OG_ENGINE | KVB_OG_LOAD,
		.run	= kvb_mode_load,
	},
	[KVB_MODE_REPLAY] = {
		.name	= "a replay",
		.opts	= OG_ENGINE | KVB_OG_ADMIN | KVB_OG_REPLAY,
		.run	= kvb_mode_replay,
	},
	[KVB_MODE_WORKLOAD] = {
		.name	= "--workload",
		.opts	= OG_ON_KVD | KVB_OG_ADMIN | KVB_OG_RUNS,
		.run	= kvb_mode_workload,
	},
	[KVB_MODE_FLOOR] = {
		.name	= "--floor",
		.opts	= OG_ON_KVD | KVB_OG_ITERS,
		.run	= kvb_mode_floor,
	},
	[KVB_MODE_HASH] = {
		.name	= "--hash-bench",
		.opts	= KVB_OG_JSON,
		.run	= kvb_mode_hash,
	},
	[KVB_MODE_REDIS] = {
		.name	= "--redis",
		.opts	= OG_ON_KVD | KVB_OG_ITERS,
		.run	= kvb_mode_redis,
	},
	[KVB_MODE_SUMMARY] = {
		.name	= "--bench-summary (it reads JSON, it writes none)",
		.opts	= 0,
		.run	= kvb_mode_summary,
	},
	[KVB_MODE_LONGGEN] = {
		.name	= "--policy",
		.opts	= OG_ON_KVD | KVB_OG_LONGGEN,
		.run	= kvb_mode_longgen,
	},
};

int main(int argc, char **argv)
{
	struct kvb_opts o;
	int ret;

	if (kvb_opts_parse(&o, argc, argv, kvb_modes)) {
		free(o.cmdline);
		return 2;
	}
	ret = kvb_modes[o.mode].run(&o);
	free(o.cmdline);
	return ret;
}
