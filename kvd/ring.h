/* SPDX-License-Identifier: MIT */
/*
 * The daemon's side of a client's request ring (ring.c).
 */
#ifndef KVD_RING_H
#define KVD_RING_H

#include <stdbool.h>
#include <stdint.h>

struct kvd;
struct kvd_client;

/* ring.c */
int kvd_ring_setup(struct kvd_client *c, uint32_t sq_entries,
		   uint32_t data_bytes);
void kvd_ring_teardown(struct kvd_client *c);
int kvd_ring_process(struct kvd *d, struct kvd_client *c, uint32_t budget);
bool kvd_ring_prepare_sleep(struct kvd_client *c);
bool kvd_ring_cq_reaped(struct kvd_client *c);
void kvd_ring_wake(struct kvd_client *c);

#endif /* KVD_RING_H */
