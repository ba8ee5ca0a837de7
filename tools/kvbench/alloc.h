/* SPDX-License-Identifier: MIT */
/* The alloc/release load of one engine process (alloc.c). */
#ifndef KVB_ALLOC_H
#define KVB_ALLOC_H

#include "worker.h"

/* Its request rings and samples; -ENOMEM. */
int kvb_alloc_init(struct worker *w);
/* Run o->requests requests; 0, or -1 after saying why. */
int kvb_alloc_run(struct worker *w);

#endif /* KVB_ALLOC_H */
