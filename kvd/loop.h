/* SPDX-License-Identifier: MIT */
/*
 * The event loop: one seam (struct kvd_loop_ops) with two backends,
 * io_uring and epoll, completing into the shared handlers of client.c,
 * admin.c and loop.c.
 */
#ifndef KVD_LOOP_H
#define KVD_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#define KVD_TICK_MS	250		/* the event loop's periodic tick */


/* cfg.event_loop (--event-loop, $KVD_EVENT_LOOP) */
enum kvd_loop_kind {
	KVD_LOOP_AUTO = 0,	/* io_uring, else epoll with a warning */
	KVD_LOOP_IO_URING,
	KVD_LOOP_EPOLL,
};

/* user_data of the daemon's io_uring (epoll data): type | slot | generation */
enum kvd_ev {
	KVD_EV_ACCEPT = 1,
	KVD_EV_ADMIN_ACCEPT,
	KVD_EV_SIGNAL,
	KVD_EV_TICK,
	KVD_EV_CTRL,
	KVD_EV_DOORBELL,
	KVD_EV_ADMIN_RECV,
	KVD_EV_IGNORE,
};

static inline uint64_t kvd_ev_pack(int type, uint32_t slot, uint32_t gen)
{
	return (uint64_t)type << 56 | (uint64_t)(slot & 0xffffff) << 32 | gen;
}

struct kvd;
struct kvd_client;

/*
 * The event loop's backend (loop.c: io_uring, loop_epoll.c: epoll). An
 * armed op completes once, into the shared handlers (kvd_client_*_done,
 * kvd_admin_recv_done, kvd_loop_accepted, kvd_loop_signal, kvd_loop_tick);
 * io_uring does the I/O, epoll waits for readiness and does it here.
 * The arm ops return 0 or -errno (io_uring's never fail).
 */
struct kvd_loop_ops {
	const char	*name;
	int		(*init)(struct kvd *d);
	void		(*exit)(struct kvd *d);
	/* Complete what is ready; sleep until something is unless @busy. */
	int		(*wait)(struct kvd *d, bool busy);
	int		(*arm_accept)(struct kvd *d, int type);
	int		(*arm_ctrl)(struct kvd *d, struct kvd_client *c);
	int		(*arm_doorbell)(struct kvd *d, struct kvd_client *c);
	int		(*arm_admin)(struct kvd *d, uint32_t slot);
	/* A client is killed: end its ops before its fds close. */
	void		(*cancel)(struct kvd *d, struct kvd_client *c);
};

/* loop.c, loop_epoll.c */
extern const struct kvd_loop_ops kvd_uring_ops;
extern const struct kvd_loop_ops kvd_epoll_ops;
int kvd_loop_init(struct kvd *d);
void kvd_loop_exit(struct kvd *d);
int kvd_loop_run(struct kvd *d);
bool kvd_loop_accepted(struct kvd *d, int type, int res);
void kvd_loop_signal(struct kvd *d, int res);
void kvd_loop_tick(struct kvd *d);

#endif /* KVD_LOOP_H */
