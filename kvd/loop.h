/* SPDX-License-Identifier: MIT */
/*
 * The event loop: the neutral loop (loop.c) over one seam, struct
 * kvd_loop_ops, with two backends of private state, io_uring
 * (loop_uring.c) and epoll (loop_epoll.c). Every completion of either goes
 * to one dispatcher in loop.c, which the backend reaches through
 * d->loop_done: the backends call nothing above them, and the ops are
 * armed through loop_io.c, which client.c and admin.c call.
 */
#ifndef KVD_LOOP_H
#define KVD_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVD_TICK_MS	250		/* the event loop's periodic tick */


/* cfg.event_loop (--event-loop, $KVD_EVENT_LOOP) */
enum kvd_loop_kind {
	KVD_LOOP_AUTO = 0,	/* io_uring, else epoll with a warning */
	KVD_LOOP_IO_URING,
	KVD_LOOP_EPOLL,
};

/* The I/O an armed op does (struct kvd_loop_op.io). */
enum kvd_loop_io {
	KVD_IO_ACCEPT,		/* an fd per connection until it fails */
	KVD_IO_READ,		/* read(fd, buf, len) */
	KVD_IO_RECV,		/* recv(fd, buf, len) */
	KVD_IO_RECVMSG,		/* recvmsg(fd, buf: a struct msghdr) */
	KVD_IO_TICK,		/* KVD_TICK_MS passed (no fd, no buffer) */
};

/*
 * One op to arm: io_uring does its I/O, epoll waits until @fd is ready
 * and does it then. Either hands @user_data and the result (bytes, the
 * accepted fd, or -errno) to the dispatcher (d->loop_done). user_data is the
 * dispatcher's; a backend only carries it.
 */
struct kvd_loop_op {
	enum kvd_loop_io io;
	int		fd;
	void		*buf;
	size_t		len;
	uint64_t	user_data;
};

/* user_data of a backend's own ops (io_uring's cancels): ignored */
#define KVD_LOOP_UD_NONE	0

struct kvd;
struct kvd_client;

/*
 * The event loop's backend. Its state is its own (d->loop_priv, set up
 * in init, freed in exit). An armed op completes once (an accept: until
 * it fails); the backends know nothing of what an op is for.
 */
struct kvd_loop_ops {
	const char	*name;
	int		(*init)(struct kvd *d);
	void		(*exit)(struct kvd *d);
	/* Why init failed with @err, for the operator. */
	void		(*explain)(int err, char *buf, size_t len);
	/* Complete what is ready; sleep until something is unless @busy. */
	int		(*wait)(struct kvd *d, bool busy);
	/* 0 or -errno (io_uring's never fails) */
	int		(*arm)(struct kvd *d, const struct kvd_loop_op *op);
	/*
	 * End the op armed with @user_data on @fd before @fd closes: 1
	 * when it ended now and will not complete, 0 when it completes
	 * later (-ECANCELED) or was not armed.
	 */
	int		(*cancel)(struct kvd *d, int fd, uint64_t user_data);
};

/* loop_uring.c, loop_epoll.c */
extern const struct kvd_loop_ops kvd_uring_ops;
extern const struct kvd_loop_ops kvd_epoll_ops;

/* loop.c */
int kvd_loop_init(struct kvd *d);
void kvd_loop_exit(struct kvd *d);
int kvd_loop_run(struct kvd *d);

/* loop_io.c: arm through d->loop; 0 or -errno */
int kvd_loop_arm_accept(struct kvd *d, int type);
int kvd_loop_arm_signal(struct kvd *d);
int kvd_loop_arm_tick(struct kvd *d);
int kvd_loop_arm_tier(struct kvd *d, int fd, uint64_t *buf);
int kvd_loop_arm_ctrl(struct kvd *d, struct kvd_client *c);
int kvd_loop_arm_doorbell(struct kvd *d, struct kvd_client *c);
int kvd_loop_arm_admin(struct kvd *d, uint32_t slot);
void kvd_loop_cancel(struct kvd *d, struct kvd_client *c);

#endif /* KVD_LOOP_H */
