// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: a Client's lock and its ring: requests left in flight
 * (wait=False), reaped by the next call; Seqs the collector dropped
 * while the lock was held.
 */
#include "kvd_py.h"

/*
 * Take @self's lock, waiting without the GIL: a thread holding the lock
 * takes the GIL back before it lets the lock go.
 */
void client_lock(client_object *self)
{
	if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
		Py_BEGIN_ALLOW_THREADS
		PyThread_acquire_lock(self->lock, WAIT_LOCK);
		Py_END_ALLOW_THREADS
	}
}

/*
 * Reap the CQEs of deferred RELEASEs: those ready, or (@wait) all of
 * them, sleeping without the GIL. A kvd that went away answers none:
 * they are dropped, and the next call says -ECONNRESET itself.
 */
int reap_deferred(client_object *self, int wait)
{
	struct kv_cqe *cqe;
	int ret;

	while (self->deferred) {
		ret = kv_peek_cqe(self->c, &cqe);
		if (ret == -EAGAIN && wait) {
			Py_BEGIN_ALLOW_THREADS
			ret = kv_wait_cqe_timeout(self->c, &cqe, self->timeout_ns);
			Py_END_ALLOW_THREADS
			if (ret == -ETIME)
				return -ETIMEDOUT;	/* still in flight */
		}
		if (ret == -EAGAIN)
			return 0;
		if (ret) {		/* kvd went away: they were dropped */
			self->deferred = 0;
			self->def_off = 0;
			return ret;
		}
		if (cqe->res < 0) {
			self->def_failed++;
			self->def_err = cqe->res;
		}
		kv_cqe_seen(self->c, cqe);
		self->deferred--;
	}
	self->def_off = 0;
	return 0;
}

/* Close what Seqs a collection dropped while we held the lock. */
void close_zombies(client_object *self)
{
	while (self->nr_zombies)
		seq_close_now(self, self->zombies[--self->nr_zombies]);
}

/* A call in a child forked since the Client connected: refuse it. */
int forked(client_object *self)
{
	if (self->pid == getpid())
		return 0;
	raise_kv(-EPERM, "kvd.Client",
		 "the client belongs to the process that made it, not to this forked child: make a new Client here");
	return 1;
}

/*
 * client_lock(), then the ring to ourselves (deferred RELEASEs reaped,
 * unless @shared); -1 with an error if @self is (or got) closed.
 */
int client_enter_ring(client_object *self, int shared)
{
	int ret;

	if (!self->c) {
		raise_kv(-EBADF, "kvd.Client", "the client is closed");
		return -1;
	}
	if (forked(self))
		return -1;
	client_lock(self);
	if (!self->c) {		/* closed while we waited */
		PyThread_release_lock(self->lock);
		raise_kv(-EBADF, "kvd.Client", "the client is closed");
		return -1;
	}
	ret = reap_deferred(self, !shared);
	if (ret) {
		PyThread_release_lock(self->lock);
		if (ret == -ETIMEDOUT)
			raise_kv(ret, "kvd.Client",
				 "kvd did not answer a request left in flight (release or commit, wait=False) within call_timeout_ms");
		else
			raise_call(self, ret, "kvd.Client");
		return -1;
	}
	if (!self->deferred)
		close_zombies(self);
	return 0;
}

int client_enter(client_object *self)
{
	return client_enter_ring(self, 0);
}

void client_leave(client_object *self)
{
	PyThread_release_lock(self->lock);
}

/*
 * An SQE whose completion nobody waits for, its @nr entries of @elem
 * bytes from @data copied to the data area at *off (8-aligned, after
 * the others in flight); the caller preps it and calls defer_submit.
 * NULL (raised) when it cannot go: more than one request carries
 * (E2BIG), no room even once the others are reaped, or a timed-out
 * call's answer still owed.
 */
struct kv_sqe *defer_sqe(client_object *self, const void *data,
			 Py_ssize_t nr, size_t elem, uint32_t *off,
			 const char *what)
{
	size_t bytes = (size_t)nr * elem;
	struct kv_sqe *sqe;
	void *dst;
	int ret;

	if (nr > KV_MAX_IDS || bytes > self->data_bytes) {
		raise_kv(-E2BIG, what, "more entries than one request carries (data_bytes)");
		return NULL;
	}
	if (self->maybe_orphan) {
		/* a sync call reaps the late completion (libkvclient gives
		 * back what it took); until it came, nothing may go out */
		Py_BEGIN_ALLOW_THREADS
		ret = kv_nop(self->c);
		Py_END_ALLOW_THREADS
		if (ret) {
			raise_call(self, ret, what);
			return NULL;
		}
		self->maybe_orphan = 0;
	}
	if (self->def_off + bytes > self->data_bytes ||
	    !kv_sq_space_left(self->c)) {
		ret = reap_deferred(self, 1);
		if (ret) {
			raise_call(self, ret, what);
			return NULL;
		}
	}
	dst = kv_data_ptr(self->c, self->def_off, (uint32_t)bytes);
	sqe = dst ? kv_get_sqe(self->c) : NULL;
	if (!sqe) {
		raise_kv(-EBUSY, what, "no room in the ring");
		return NULL;
	}
	memcpy(dst, data, bytes);
	*off = self->def_off;
	return sqe;
}

int defer_submit(client_object *self, size_t bytes, const char *what)
{
	int ret = kv_submit(self->c);

	if (ret < 0) {
		raise_call(self, ret, what);
		return -1;
	}
	self->def_off += (uint32_t)((bytes + 7) & ~(size_t)7);
	self->deferred++;
	return 0;
}
