/* SPDX-License-Identifier: MIT */
/*
 * The admin socket (kvctl): one request, one reply datagram.
 */
#ifndef KVD_ADMIN_H
#define KVD_ADMIN_H

#include <stdint.h>
#include <kv/abi.h>

#define KVD_MAX_ADMIN	32
/* Connections waiting to say HELLO get slots of their own, so silent
 * connections never take a client's slot; past this the oldest goes. */
#define KVD_MAX_PENDING	64

struct kvd_admin_conn {
	int		fd;
	uint32_t	gen;
	uint64_t	t_accept_ns;
	union {
		struct kv_admin_req	req;
		struct kv_admin_pin_req	pin;	/* KV_ADMIN_PIN, _UNPIN */
	};
	uint8_t		pad[64];	/* detects an oversized request */
};


struct kvd;

/* admin.c */
void kvd_admin_accept(struct kvd *d, int fd);
void kvd_admin_recv_done(struct kvd *d, uint32_t slot, int res);
void kvd_admin_tick(struct kvd *d);
void kvd_admin_fill_status(struct kvd *d, struct kv_admin_status *st);

#endif /* KVD_ADMIN_H */
