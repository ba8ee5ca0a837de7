/* SPDX-License-Identifier: MIT */
/* The flow of the load and replay modes (run.c). */
#ifndef KVB_RUN_H
#define KVB_RUN_H

#include "kvbench.h"

/*
 * kvb_fleet_run - start a private kvd if asked, probe kvd, run the
 * engine processes, report. For a replay, o->tr and o->sh are set up
 * first (mode_replay.c). Returns the exit status: 0, 1 a process failed
 * or a block did not verify, 2 kvd cannot take the run.
 */
int kvb_fleet_run(struct kvb_opts *o);

#endif /* KVB_RUN_H */
