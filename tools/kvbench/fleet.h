/* SPDX-License-Identifier: MIT */
/* The process fleet of the load and replay modes (fleet.c). */
#ifndef KVB_FLEET_H
#define KVB_FLEET_H

#include "kvbench.h"

/* @len bytes from pipe @fd, through EINTR and short reads: 0, or -1 at
 * an error or EOF first. */
int kvb_read_full(int fd, void *buf, size_t len);

/*
 * Fork all, wait until each is connected, start them together, collect.
 * Returns 0 when all ran fine, 1 when one failed, -1 when none started.
 */
int kvb_run_children(const struct kvb_opts *o, struct child *ch,
		     struct agg *a);

/* "ok", or "FAIL" for a process that failed or had a block not verify. */
const char *kvb_proc_status(const struct child *ch);

#endif /* KVB_FLEET_H */
