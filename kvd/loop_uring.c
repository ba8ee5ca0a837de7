// SPDX-License-Identifier: MIT
/*
 * The io_uring event-loop backend (liburing): each armed op is one SQE,
 * multishot for accepts, a timeout for the tick; each CQE goes to the
 * dispatcher (d->loop_done) with the user_data it was armed with. The
 * ring and the tick's timespec are this file's alone (struct uring,
 * d->loop_priv); no other file of kvd includes liburing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <liburing.h>

#include "daemon.h"
#include "loop.h"

#define KVD_URING_ENTRIES	1024

struct uring {
	struct io_uring	ring;
	struct __kernel_timespec tick;
	bool		async_cancel;	/* no IORING_REGISTER_SYNC_CANCEL */
};

static struct uring *uring_of(struct kvd *d)
{
	return d->loop_priv;
}

static struct io_uring_sqe *uring_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	while (!sqe) {
		/* SQ full: hand what is queued to the kernel, then retry. */
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static int uring_arm(struct kvd *d, const struct kvd_loop_op *op)
{
	struct uring *u = uring_of(d);
	struct io_uring_sqe *sqe = uring_sqe(&u->ring);

	switch (op->io) {
	case KVD_IO_ACCEPT:
		io_uring_prep_multishot_accept(sqe, op->fd, NULL, NULL,
					       SOCK_CLOEXEC);
		break;
	case KVD_IO_READ:
		io_uring_prep_read(sqe, op->fd, op->buf, op->len, 0);
		break;
	case KVD_IO_RECV:
		io_uring_prep_recv(sqe, op->fd, op->buf, op->len, 0);
		break;
	case KVD_IO_RECVMSG:
		io_uring_prep_recvmsg(sqe, op->fd, op->buf, 0);
		break;
	case KVD_IO_TICK:
		u->tick.tv_sec = 0;
		u->tick.tv_nsec = KVD_TICK_MS * 1000000LL;
		io_uring_prep_timeout(sqe, &u->tick, 0, 0);
		break;
	}
	io_uring_sqe_set_data64(sqe, op->user_data);
	return 0;
}

/*
 * Synchronous where the kernel can (6.0): when this returns the op has
 * ended and touches its buffers no more (cancelled, or it had completed:
 * -ENOENT), so the client's slot is free at once, as with epoll; a flood
 * of silent connections would otherwise fill every slot with killed
 * ones waiting for their CQEs. Those CQEs still come: the dispatcher
 * finds them stale (the slot free or reused) and ignores them. The op
 * being dispatched is not cancelled (loop_io.c).
 */
static int uring_cancel_sync(struct uring *u, uint64_t user_data)
{
	struct io_uring_sync_cancel_reg reg = {
		.addr = user_data,
		.timeout = { .tv_sec = 1 },	/* our ops never block */
	};
	int ret = io_uring_register_sync_cancel(&u->ring, &reg);

	if (ret == 0 || ret == -ENOENT)
		return 1;
	/* before 6.0 (or stuck): from now on the CQE frees the slot */
	u->async_cancel = true;
	return -1;
}

static int uring_cancel(struct kvd *d, int fd, uint64_t user_data)
{
	struct uring *u = uring_of(d);
	struct io_uring_sqe *sqe;
	int ret;

	/*
	 * io_uring looks fds up when it issues an SQE: ops on this fd
	 * still queued must be issued before its number can be reused by
	 * the next accept, or they would act on another client's socket;
	 * and a sync cancel finds only issued ops.
	 */
	io_uring_submit(&u->ring);
	if (!u->async_cancel) {
		ret = uring_cancel_sync(u, user_data);
		if (ret >= 0)
			return ret;
	}
	/* The cancelled op still completes (-ECANCELED), into the dispatcher. */
	sqe = uring_sqe(&u->ring);
	io_uring_prep_cancel64(sqe, user_data, 0);
	io_uring_sqe_set_data64(sqe, KVD_LOOP_UD_NONE);
	io_uring_submit(&u->ring);
	return 0;
}

static void uring_exit(struct kvd *d)
{
	struct uring *u = uring_of(d);

	if (!u)
		return;
	io_uring_queue_exit(&u->ring);
	free(u);
	d->loop_priv = NULL;
}

/*
 * -EOPNOTSUPP: the kernel has io_uring but not the SETUP flags of 5.19,
 * so neither multishot accept (5.19), which the loop is built on.
 */
static int ring_setup(struct io_uring *ring)
{
	struct io_uring_params p = { 0 };
	int ret;

	p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
	ret = io_uring_queue_init_params(KVD_URING_ENTRIES, ring, &p);
	if (ret != -EINVAL)
		return ret;
	memset(&p, 0, sizeof(p));
	ret = io_uring_queue_init_params(KVD_URING_ENTRIES, ring, &p);
	if (ret)
		return ret;
	io_uring_queue_exit(ring);
	return -EOPNOTSUPP;
}

static int uring_init(struct kvd *d)
{
	struct io_uring_sqe *sqe;
	struct uring *u;
	int ret;

	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	ret = ring_setup(&u->ring);
	if (ret)
		goto free_u;
	d->loop_priv = u;
	/* io_uring_enter too may be blocked (seccomp): try it now. */
	sqe = uring_sqe(&u->ring);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, KVD_LOOP_UD_NONE);
	ret = io_uring_submit(&u->ring);
	if (ret < 0) {
		uring_exit(d);
		return ret;
	}
	return 0;
free_u:
	free(u);
	return ret;
}

/* An integer sysctl, or -1. */
static int read_sysctl(const char *path)
{
	char buf[32];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return atoi(buf);
}

static void uring_explain(int err, char *buf, size_t len)
{
	int off = read_sysctl("/proc/sys/kernel/io_uring_disabled");

	if (err == -EOPNOTSUPP)
		snprintf(buf, len, "kernel older than 5.19: no multishot accept");
	else if (err == -EPERM && off > 0)
		snprintf(buf, len, "io_uring: %s (sysctl kernel.io_uring_disabled = %d)",
			 strerror(-err), off);
	else if (err == -EPERM)
		snprintf(buf, len, "io_uring: %s (blocked by a seccomp profile or an LSM?)",
			 strerror(-err));
	else if (err == -ENOSYS)
		snprintf(buf, len, "io_uring: %s (kernel without io_uring, or blocked by a seccomp profile)",
			 strerror(-err));
	else
		snprintf(buf, len, "io_uring: %s", strerror(-err));
}

static int uring_wait(struct kvd *d, bool busy)
{
	struct uring *u = uring_of(d);
	struct io_uring_cqe *cqe;
	unsigned head, n = 0;
	int ret;

	if (busy)
		ret = io_uring_submit(&u->ring);
	else
		ret = io_uring_submit_and_wait(&u->ring, 1);
	if (ret < 0 && ret != -EINTR && ret != -EBUSY && ret != -ETIME) {
		kvd_err("io_uring: %s", strerror(-ret));
		return ret;
	}
	/* A multishot accept ends on any error, so the dispatcher never
	 * asks to end one that goes on: its answer is not needed here. */
	io_uring_for_each_cqe(&u->ring, head, cqe) {
		d->loop_done(d, io_uring_cqe_get_data64(cqe), cqe->res,
				  cqe->flags & IORING_CQE_F_MORE);
		n++;
	}
	io_uring_cq_advance(&u->ring, n);
	return 0;
}

const struct kvd_loop_ops kvd_uring_ops = {
	.name		= "io_uring",
	.init		= uring_init,
	.exit		= uring_exit,
	.explain	= uring_explain,
	.wait		= uring_wait,
	.arm		= uring_arm,
	.cancel		= uring_cancel,
};
