/* SPDX-License-Identifier: MIT */
/*
 * kvbench's modes, one file each (mode_*.c), for the mode table of
 * main.c. Each takes the parsed options and returns the exit status:
 * 0 done, 1 failed, 2 usage or set-up error.
 */
#ifndef KVB_MODES_H
#define KVB_MODES_H

#include "opts.h"

int kvb_mode_load(struct kvb_opts *o);
int kvb_mode_replay(struct kvb_opts *o);
int kvb_mode_workload(struct kvb_opts *o);
int kvb_mode_floor(struct kvb_opts *o);
int kvb_mode_hash(struct kvb_opts *o);
int kvb_mode_redis(struct kvb_opts *o);
int kvb_mode_summary(struct kvb_opts *o);
int kvb_mode_longgen(struct kvb_opts *o);

#endif /* KVB_MODES_H */
