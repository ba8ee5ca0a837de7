// SPDX-License-Identifier: MIT
/*
 * kvbench's default mode, the alloc/release load: --procs engine
 * processes each run --requests requests of --min-tokens..--max-tokens
 * tokens, synchronously or --batch N at a time, writing and verifying
 * every block they get (alloc.c is one process; run.c the flow;
 * opts.c sizes the rings for the batches).
 */
#include "modes.h"
#include "run.h"

int kvb_mode_load(struct kvb_opts *o)
{
	return kvb_fleet_run(o);
}
