/* SPDX-License-Identifier: MIT */
/*
 * What an armed op is for, in its user_data: type | slot | generation.
 * Packed when loop_io.c arms an op, unpacked by the dispatcher in loop.c;
 * the backends only carry it. Private to those two files.
 */
#ifndef KVD_LOOP_EV_H
#define KVD_LOOP_EV_H

#include <stdint.h>

/* What an op is for: the top byte of its user_data. */
enum kvd_ev {
	KVD_EV_ACCEPT = 1,
	KVD_EV_ADMIN_ACCEPT,
	KVD_EV_SIGNAL,
	KVD_EV_TICK,
	KVD_EV_CTRL,
	KVD_EV_DOORBELL,
	KVD_EV_ADMIN_RECV,
	KVD_EV_TIER,		/* the disk tier's eventfd */
};

/* user_data: type | slot | generation (the slot's, so stale ones show) */
static inline uint64_t kvd_ev_pack(int type, uint32_t slot, uint32_t gen)
{
	return (uint64_t)type << 56 | (uint64_t)(slot & 0xffffff) << 32 | gen;
}

static inline int kvd_ev_type(uint64_t user_data)
{
	return (int)(user_data >> 56);
}

static inline uint32_t kvd_ev_slot(uint64_t user_data)
{
	return (user_data >> 32) & 0xffffff;
}

static inline uint32_t kvd_ev_gen(uint64_t user_data)
{
	return (uint32_t)user_data;
}

#endif /* KVD_LOOP_EV_H */
