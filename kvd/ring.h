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
/* Has SQEs parked or a CQE held back: kvd retries it itself. */
bool kvd_ring_parked(const struct kvd_client *c);
/* Takes no SQE now (a CQE held back, or sq_entries SQEs parked). */
bool kvd_ring_blocked(const struct kvd_client *c);
void kvd_ring_wake(struct kvd_client *c);

#endif /* KVD_RING_H */
