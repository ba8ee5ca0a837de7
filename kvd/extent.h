/* SPDX-License-Identifier: MIT */
/*
 * Extents: the pool's exportable allocations, backed and given back as
 * pages are used, and sent to the clients of the tenant that owns them.
 */
#ifndef KVD_EXTENT_H
#define KVD_EXTENT_H

#include <stdbool.h>
#include <stdint.h>

struct kvd;
struct kvd_client;
struct kvd_pool;

/* extent.c */
int kvd_extents_create(struct kvd *d, uint64_t extent_bytes);
void kvd_extents_destroy(struct kvd *d);
void kvd_extents_send(struct kvd *d, struct kvd_client *c);
bool kvd_extents_current(struct kvd *d, struct kvd_client *c);
void kvd_extents_tick(struct kvd *d);
int kvd_extent_claim(struct kvd_pool *pool, uint32_t e, int32_t owner);

#endif /* KVD_EXTENT_H */
