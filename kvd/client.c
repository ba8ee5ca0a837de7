// SPDX-License-Identifier: MIT
/*
 * Client lifetime: accept, HELLO -> WELCOME with the ring, eventfds and
 * pool passed by SCM_RIGHTS, then teardown when the control socket closes
 * or the process that connected exits, whichever comes first: a child it
 * forked may hold a copy of the socket and keep it open for ever.
 * A client that asked for a lease is also ended when it makes no call
 * for that long (stopped, hung): else it would hold its blocks for ever.
 *
 * A slot is reused only when no event-loop op names it any more (inflight
 * == 0), so a late completion can never write into a new client's
 * buffers; the generation in user_data makes stale CQEs recognisable.
 */
#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <kv/barrier.h>
#include <kv/kv.h>

#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "extent.h"
#include "loop.h"
#include "ring.h"
#include "tenant.h"

/*
 * Has pending @c said HELLO? Its bytes wait in its socket, or the event
 * loop received them into c->rx already (kvd_client_accept zeroed it)
 * and the completion is not dispatched yet: io_uring's multishot accept
 * can post a burst of accepts ahead of it.
 */
static bool hello_arrived(const struct kvd_client *c)
{
	char b;

	return KV_READ_ONCE(c->rx.hello.magic) != 0 ||
	       recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* The silent connection that has waited longest for its HELLO. */
static struct kvd_client *oldest_pending(struct kvd *d)
{
	struct kvd_client *oldest = NULL;

	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state == KVD_CLIENT_HELLO &&
		    (!oldest || c->t_accept_ns < oldest->t_accept_ns) &&
		    !hello_arrived(c))
			oldest = c;
	}
	return oldest;
}

static void say_refused(int fd, const char *why);

/*
 * A free slot for a new connection. Live clients are limited at HELLO
 * (max_clients); pending ones here: past KVD_MAX_PENDING the oldest that
 * has not said HELLO is dropped (a real client says it at once), told
 * -EAGAIN, so silent connections can neither lock clients out nor pile
 * up. NULL when every pending one has said HELLO.
 */
static struct kvd_client *slot_get(struct kvd *d)
{
	struct kvd_client *old;

	if (d->nr_pending >= KVD_MAX_PENDING && (old = oldest_pending(d))) {
		say_refused(old->sock,
			    "kvd dropped this connection: no HELLO while others waited; try again");
		kvd_client_kill(d, old, "no HELLO, slot needed");
	}
	for (uint32_t i = 0; i < d->nr_slots; i++)
		if (d->clients[i].state == KVD_CLIENT_FREE)
			return &d->clients[i];
	return NULL;
}

/* Only epoll's arming can fail (no memory for the watch). */
static void arm_failed(struct kvd *d, struct kvd_client *c, int err)
{
	char why[96];

	snprintf(why, sizeof(why), "cannot watch its fds: %s", strerror(-err));
	kvd_client_kill(d, c, why);
}

static void arm_ctrl(struct kvd *d, struct kvd_client *c)
{
	int err;

	if (c->state == KVD_CLIENT_DEAD)
		return;
	memset(&c->msg, 0, sizeof(c->msg));
	c->iov.iov_base = c->rx.raw;
	c->iov.iov_len = sizeof(c->rx.raw);
	c->msg.msg_iov = &c->iov;
	c->msg.msg_iovlen = 1;
	err = kvd_loop_arm_ctrl(d, c);
	if (err)
		return arm_failed(d, c, err);
}

static void arm_doorbell(struct kvd *d, struct kvd_client *c)
{
	int err;

	if (c->state == KVD_CLIENT_DEAD)
		return;
	err = kvd_loop_arm_doorbell(d, c);
	if (err)
		return arm_failed(d, c, err);
}

static void send_welcome(int sock, struct kv_welcome *w, size_t size,
			 const int *fds, int nfds);

/*
 * Tell @fd -EAGAIN and @why. Closing a unix socket with unread data
 * resets the peer, which would then never read the WELCOME (ECONNRESET
 * instead of -EAGAIN): stop further sends and drain what already came
 * (its HELLO); the caller closes.
 */
static void say_refused(int fd, const char *why)
{
	struct kv_welcome w = { .status = -EAGAIN };
	char drain[sizeof(struct kv_hello)];

	snprintf(w.errmsg, sizeof(w.errmsg), "%s", why);
	send_welcome(fd, &w, sizeof(w), NULL, 0);
	shutdown(fd, SHUT_RD);
	while (recv(fd, drain, sizeof(drain), MSG_DONTWAIT) > 0)
		;
}

/* No slot at all: say why before closing (-EAGAIN). */
static void refuse_full(struct kvd *d, int fd)
{
	const char *why = "kvd is busy with connections that did not say HELLO; try again";

	if (kvd_ratelimit(&d->rl_full))
		kvd_warn("refusing clients: %s", why);
	say_refused(fd, why);
	close(fd);
}

/* The peer's supplementary groups, for tenants given by group. */
static void peer_groups(struct kvd_client *c, int fd)
{
	gid_t g[ARRAY_SIZE(c->groups)];
	socklen_t len = sizeof(g);

	c->nr_groups = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len))
		return;		/* too many groups, or old kernel: uid/gid only */
	for (uint32_t i = 0; i < len / sizeof(g[0]); i++)
		c->groups[c->nr_groups++] = g[i];
}

/*
 * A pidfd of the process that connected (SO_PEERCRED's pid), readable
 * once it exits. Taken at accept, while that process is surely alive or
 * a zombie (it is blocked in, or just past, connect), so the pid cannot
 * have been reused yet. -1 where the kernel has no pidfd_open (< 5.3) or
 * the pid is not ours to see (another pid namespace): such a client ends
 * only when its socket closes.
 */
static int pid_watch(pid_t pid)
{
#ifdef SYS_pidfd_open
	long fd;

	if (pid <= 0)
		return -1;
	fd = syscall(SYS_pidfd_open, pid, 0);	/* close-on-exec always */
	return fd < 0 ? -1 : (int)fd;
#else
	(void)pid;
	return -1;
#endif
}

static void pid_unwatch(struct kvd_client *c)
{
	if (c->pid_watched)
		close(c->pidfd);
	c->pid_watched = false;
	c->pidfd = -1;
}

void kvd_client_accept(struct kvd *d, int fd)
{
	struct kvd_client *c = slot_get(d);
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (!c)
		return refuse_full(d, fd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		if (kvd_ratelimit(&d->rl_accept))
			kvd_warn("SO_PEERCRED: %m");
		close(fd);
		return;
	}
	c->gen++;
	c->id = kvd_next_id(&d->next_client_id, d->id_key);
	c->state = KVD_CLIENT_HELLO;
	d->nr_pending++;
	c->inflight = 0;
	c->sock = fd;
	c->ring_fd = c->sq_evfd = c->cq_evfd = -1;
	c->pid = cred.pid;
	c->pidfd = pid_watch(cred.pid);
	c->pid_watched = c->pidfd >= 0;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->tenant = -1;
	peer_groups(c, fd);
	c->t_accept_ns = kvd_now_ns();
	c->ns = NULL;
	c->ops = 0;
	c->rx.hello.magic = 0;		/* see hello_arrived() */
	kvd_holder_init(&c->holder, c->slot);
	arm_ctrl(d, c);
}

/*
 * @size: sizeof(*w), or the size a client of an older minor expects
 * (KV_WELCOME_SIZE_3_2): it takes only a WELCOME of its own size.
 */
static void send_welcome(int sock, struct kv_welcome *w, size_t size,
			 const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = { .iov_base = w, .iov_len = size };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	w->magic = KV_MAGIC;
	w->abi_major = KV_ABI_MAJOR;
	w->abi_minor = KV_ABI_MINOR;
	w->type = KV_MSG_WELCOME;
	w->size = (__u32)size;
	if (nfds) {
		memset(cbuf, 0, sizeof(cbuf));
		msg.msg_control = cbuf;
		msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
	}
	if (sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		kvd_dbg("WELCOME: %m");
}

static void refuse(struct kvd *d, struct kvd_client *c, int err,
		   const char *why)
{
	struct kv_welcome w = { .status = err };

	snprintf(w.errmsg, sizeof(w.errmsg), "%s", why);
	if (kvd_ratelimit(&d->rl_kill))
		kvd_info("client %u (pid %d uid %u) refused: %s", c->id,
			 (int)c->pid, (unsigned)c->uid, why);
	send_welcome(c->sock, &w, sizeof(w), NULL, 0);
	kvd_client_kill(d, c, NULL);
}

/* Names end up in logs and kvctl tables: no spaces, no control bytes. */
static bool printable(const char *s)
{
	for (; *s; s++)
		if (*s < 0x21 || *s > 0x7e)
			return false;
	return true;
}

/* Check a HELLO: returns 0 or -errno with *why set. */
int kvd_hello_check(struct kvd *d, const struct kv_hello *h, int len,
		    const char **why)
{
	if (len != (int)sizeof(*h) || h->magic != KV_MAGIC ||
	    h->type != KV_MSG_HELLO || h->size != sizeof(*h)) {
		*why = "malformed HELLO";
		return -EPROTO;
	}
	if (h->abi_major != KV_ABI_MAJOR) {
		*why = "ABI major version mismatch";
		return -EPROTO;
	}
	if (h->flags) {
		*why = "HELLO flags not zero";
		return -EINVAL;
	}
	if (h->lease_ms && (h->lease_ms < KV_LEASE_MIN_MS ||
			    h->lease_ms > KV_LEASE_MAX_MS)) {
		*why = "lease_ms must be 0 (none) or 1000..86400000";
		return -EINVAL;
	}
	if (!kvd_is_pow2(h->sq_entries) || h->sq_entries > KV_MAX_SQ_ENTRIES) {
		*why = "sq_entries must be a power of two up to 4096";
		return -EINVAL;
	}
	if (d->cfg.max_ring_entries && h->sq_entries > d->cfg.max_ring_entries) {
		*why = "sq_entries above this kvd's max_ring_entries";
		return -EINVAL;
	}
	if (h->data_bytes < KV_MIN_DATA_BYTES ||
	    h->data_bytes > KV_MAX_DATA_BYTES || h->data_bytes % 4096) {
		*why = "data_bytes must be a multiple of 4096, 4 KiB..16 MiB";
		return -EINVAL;
	}
	if (!memchr(h->model_id, 0, sizeof(h->model_id)) || !h->model_id[0]) {
		*why = "model_id must be a non-empty NUL-terminated string";
		return -EINVAL;
	}
	if (!printable(h->model_id)) {
		*why = "model_id must be printable ASCII without spaces";
		return -EINVAL;
	}
	if (!memchr(h->model_rev, 0, sizeof(h->model_rev))) {
		*why = "model_rev must be NUL-terminated";
		return -EINVAL;
	}
	if (!printable(h->model_rev)) {
		*why = "model_rev must be printable ASCII without spaces";
		return -EINVAL;
	}
	return kvd_geometry_check(&h->geom, d->pool.bytes, why);
}

/*
 * No namespace slot left: one without clients and without blocks in use
 * keeps only cached blocks; drop them and reuse its slot.
 */
static struct kvd_ns *ns_reclaim(struct kvd *d)
{
	for (uint32_t i = 0; i < d->cfg.max_namespaces; i++) {
		struct kvd_ns *ns = &d->ns[i];

		if (!ns->live || ns->nr_clients || ns->blocks_used)
			continue;
		kvd_info("namespace %u (%s): %u cached blocks dropped for a new model",
			 ns->handle, ns->model_id, kvd_ns_evict_all(ns));
		kvd_ns_exit(ns);
		d->nr_ns--;
		return ns;
	}
	return NULL;
}

static struct kvd_ns *ns_get(struct kvd *d, const struct kvd_client *c,
			     const struct kv_hello *h, int *err)
{
	struct kvd_ns *free_ns = NULL;
	const struct kvd_quota_conf *q;
	uint32_t i, tenant = (uint32_t)c->tenant;

	for (i = 0; i < d->cfg.max_namespaces; i++) {
		if (kvd_ns_match(&d->ns[i], h->model_id, h->model_rev, &h->geom,
				 tenant))
			return &d->ns[i];
		if (!d->ns[i].live && !free_ns)
			free_ns = &d->ns[i];
	}
	*err = -ENOSPC;
	if (!free_ns)
		free_ns = ns_reclaim(d);
	if (!free_ns)
		return NULL;
	*err = kvd_ns_init(free_ns, &d->pool, (uint32_t)(free_ns - d->ns),
			   h->model_id, h->model_rev, &h->geom, tenant,
			   &d->tenants[tenant].key);
	if (*err)
		return NULL;
	free_ns->handle = kvd_next_id(&d->next_ns_handle, d->id_key);
	free_ns->tacct = &d->tenants[tenant].acct;
	q = kvd_conf_quota(&d->conf, d->tenants[tenant].name, h->model_id);
	if (q) {
		free_ns->acct.min_pages = q->min_pages;
		free_ns->acct.max_pages = q->max_pages;
	}
	d->nr_ns++;
	kvd_info("namespace %u: model %s, %llu-byte blocks, %u-page slabs",
		 free_ns->handle, free_ns->model_id,
		 (unsigned long long)free_ns->block_bytes, free_ns->slab_pages);
	return free_ns;
}

/*
 * The last client of a namespace left: if it keeps nothing (no block in
 * use, no slab), free its books and its slot for another model.
 */
static void ns_put(struct kvd *d, struct kvd_ns *ns)
{
	if (--ns->nr_clients || ns->blocks_used || ns->nr_slabs)
		return;
	kvd_info("namespace %u (%s): idle, freed", ns->handle, ns->model_id);
	kvd_ns_exit(ns);
	d->nr_ns--;
}

/*
 * The context settings of a namespace (@tenant, @model_id, @dtype): its
 * kvd.conf section as now loaded, so a reload applies to each client
 * that comes after it. kvd's kernels cannot mask a foreign layout: an
 * opaque namespace also refuses window, sinks and truncate drop, and
 * such a default falls back to none (returns true then).
 */
bool kvd_ns_ctx(const struct kvd *d, uint32_t tenant, const char *model_id,
		uint32_t dtype, uint32_t *max_context, uint32_t *refused,
		struct kv_ctx_policy *def)
{
	const struct kvd_quota_conf *q;

	*max_context = *refused = 0;
	memset(def, 0, sizeof(*def));
	q = kvd_conf_quota(&d->conf, d->tenants[tenant].name, model_id);
	if (q) {
		*max_context = q->max_context;
		*refused = q->ctx_refused;
		*def = q->ctx_default;
	}
	if (dtype != KV_DTYPE_OPAQUE)
		return false;
	*refused |= 1U << KV_CTX_WINDOW | 1U << KV_CTX_SINKS;
	/* truncate drop masks too; its kind (truncate stop) stays */
	if (!(*refused >> def->kind & 1) &&
	    !(def->flags & KV_CTX_DROP_OLDEST))
		return false;
	memset(def, 0, sizeof(*def));
	return true;
}

/* WELCOME's context settings; a default dropped is said once, when the
 * namespace gets its first client. */
static void welcome_ctx(struct kvd *d, const struct kvd_client *c,
			const struct kv_hello *h, struct kv_welcome *w)
{
	const struct kvd_quota_conf *q;
	char pol[64];

	if (!kvd_ns_ctx(d, (uint32_t)c->tenant, h->model_id, h->geom.dtype,
			&w->max_context, &w->ctx_refused, &w->ctx_default))
		return;
	q = kvd_conf_quota(&d->conf, d->tenants[c->tenant].name, h->model_id);
	if (q && c->ns->nr_clients == 1 &&
	    kv_ctx_policy_format(&q->ctx_default, pol, sizeof(pol)) >= 0)
		kvd_info("namespace %u (%s): context_policy %s needs kvd's masks, which an opaque dtype cannot have; its clients get none",
			 c->ns->handle, c->ns->model_id, pol);
}

static void hello(struct kvd *d, struct kvd_client *c, int len)
{
	const struct kv_hello *h = &c->rx.hello;
	struct kv_welcome w = { 0 };
	const char *why = NULL;
	int fds[3], err;
	char msg[KV_ERRMSG_MAX];

	err = kvd_hello_check(d, h, len, &why);
	if (!err) {
		err = kvd_tenant_of(d, c->uid, c->gid, c->groups, c->nr_groups,
				    &why);
		if (err >= 0) {
			c->tenant = err;
			err = 0;
		}
	}
	if (!err && d->nr_clients >= d->cfg.max_clients) {
		snprintf(msg, sizeof(msg), "all %u client slots in use",
			 d->cfg.max_clients);
		return refuse(d, c, -EUSERS, msg);
	}
	if (err) {
		if (err == -EPROTO && len == (int)sizeof(*h) &&
		    h->magic == KV_MAGIC) {
			snprintf(msg, sizeof(msg),
				 "ABI version mismatch: client %u.%u, kvd %u.%u",
				 h->abi_major, h->abi_minor, KV_ABI_MAJOR,
				 KV_ABI_MINOR);
			why = msg;
		}
		return refuse(d, c, err, why);
	}
	c->ns = ns_get(d, c, h, &err);
	if (!c->ns)
		return refuse(d, c, err, err == -ENOSPC ?
			      "no namespace slot left" :
			      "namespace creation failed");
	c->ns->nr_clients++;
	c->holder.max_refs = d->cfg.max_client_blocks;
	err = kvd_ring_setup(c, h->sq_entries, h->data_bytes);
	if (err)
		return refuse(d, c, err, "ring setup failed");
	c->sq_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->cq_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->sq_evfd < 0 || c->cq_evfd < 0)
		return refuse(d, c, -EMFILE, "eventfd failed");
	free(c->ext_sent);
	c->ext_sent = calloc(d->pool.nr_extents + 1, sizeof(*c->ext_sent));
	if (!c->ext_sent)
		return refuse(d, c, -ENOMEM, "out of memory");

	w.client_id = c->id;
	w.ns_id = c->ns->handle;
	w.backend = d->be->backend;
	w.export_kind = d->be->export_kind;
	w.device = -1;
	if (w.backend == KV_BACKEND_CUDA)
		kvd_cuda_welcome(d, &w);
	w.pool_bytes = d->pool.bytes;
	w.page_bytes = KV_PAGE_BYTES;
	w.block_bytes = c->ns->block_bytes;
	w.slab_bytes = c->ns->slab_bytes;
	w.max_blocks = c->ns->max_blocks;
	w.features = KV_FEAT_NEED_WAKEUP | KV_FEAT_LEASE;
	w.boot_id = d->boot_id | 1;	/* never 0, an older kvd's */
	welcome_ctx(d, c, h, &w);
	w.ring = c->off;
	/* legacy: one range, the whole pool, opened from w.ipc_handle */
	w.extent_bytes = d->pool.bytes;
	w.nr_extents = 1;
	if (d->be->extents) {
		w.features |= KV_FEAT_EXTENTS;
		w.extent_bytes = (uint64_t)d->pool.extent_pages * KV_PAGE_BYTES;
		w.nr_extents = d->pool.nr_extents;
	}
	fds[0] = c->ring_fd;
	fds[1] = c->sq_evfd;
	fds[2] = c->cq_evfd;
	/* a 3.0..3.2 client takes only the WELCOME it knows (3.3: ctx) */
	send_welcome(c->sock, &w, h->abi_minor < 3 ? KV_WELCOME_SIZE_3_2 :
		     sizeof(w), fds, 3);
	c->state = KVD_CLIENT_LIVE;
	c->lease_ms = h->lease_ms;
	c->seen_ns = kvd_now_ns();
	c->seen_ops = c->ops;
	c->seen_cq_head = KV_READ_ONCE(*c->cq_khead);
	c->seen_sq_tail = KV_READ_ONCE(*c->sq_ktail);
	c->live_idx = d->nr_clients;
	d->live[d->nr_clients] = c->slot;
	d->nr_pending--;
	d->nr_clients++;
	kvd_client_activate(d, c);
	d->tenants[c->tenant].nr_clients++;
	c->doomed = NULL;
	kvd_extents_send(d, c);		/* its tenant's extents, after WELCOME */
	kvd_info("client %u: pid %d uid %u model %s ns %u sq %u lease %u ms",
		 c->id, (int)c->pid, (unsigned)c->uid, c->ns->model_id,
		 c->ns->handle, c->sq_entries, c->lease_ms);
	arm_doorbell(d, c);
	arm_ctrl(d, c);
}

void kvd_client_ctrl_done(struct kvd *d, struct kvd_client *c, int res)
{
	if (c->state == KVD_CLIENT_DEAD)
		return;
	if (c->state == KVD_CLIENT_HELLO) {
		if (res < 0)
			return kvd_client_kill(d, c, strerror(-res));
		if (res == 0)
			return kvd_client_kill(d, c, NULL);
		/* file descriptors sent to kvd: the kernel closed them
		 * (no room was given); a client has none to send */
		if (c->msg.msg_flags & MSG_CTRUNC)
			return kvd_client_kill(d, c,
					       "sent file descriptors with HELLO");
		return hello(d, c, (c->msg.msg_flags & MSG_TRUNC) ? -1 : res);
	}
	/* After WELCOME the client only closes; anything else is an error. */
	kvd_client_kill(d, c, res > 0 ? "unexpected control message" : NULL);
}

void kvd_client_doorbell_done(struct kvd *d, struct kvd_client *c, int res)
{
	if (c->state != KVD_CLIENT_LIVE)
		return;
	if (res < 0 && res != -EAGAIN && res != -EINTR) {
		kvd_client_kill(d, c, "doorbell read failed");
		return;
	}
	if (res > 0)
		c->seen_ns = kvd_now_ns();	/* a call, or kv_heartbeat */
	kvd_client_activate(d, c);	/* it rang: it has work */
	arm_doorbell(d, c);
}

/* The last op naming the slot finished: close everything, free it. */
static void client_free(struct kvd_client *c)
{
	free(c->ext_sent);
	c->ext_sent = NULL;
	kvd_ring_teardown(c);
	if (c->sq_evfd >= 0)
		close(c->sq_evfd);
	if (c->cq_evfd >= 0)
		close(c->cq_evfd);
	c->sq_evfd = c->cq_evfd = -1;
	c->state = KVD_CLIENT_FREE;
}

void kvd_client_put_op(struct kvd *d, struct kvd_client *c)
{
	(void)d;
	if (--c->inflight == 0 && c->state == KVD_CLIENT_DEAD)
		client_free(c);
}

/*
 * kvd_client_kill - end a client: release every block it holds now, close
 * its socket, and cancel its event-loop ops; the slot is freed once they
 * have completed. Other clients are not touched.
 */
/* Swap live[@i] and live[@j], keeping each client's live_idx. */
static void live_swap(struct kvd *d, uint32_t i, uint32_t j)
{
	uint32_t a = d->live[i], b = d->live[j];

	d->live[i] = b;
	d->live[j] = a;
	d->clients[b].live_idx = i;
	d->clients[a].live_idx = j;
}

/* Into the polled part of d->live (a new client, or it rang). */
void kvd_client_activate(struct kvd *d, struct kvd_client *c)
{
	if (c->state != KVD_CLIENT_LIVE || c->live_idx < d->nr_active)
		return;
	live_swap(d, c->live_idx, d->nr_active++);
	c->served = true;	/* its idle time counts from now */
}

/*
 * Out of the polled part: the caller set KV_SQ_NEED_WAKEUP and found no
 * SQE after it (kvd_ring_prepare_sleep), so its next one rings.
 */
void kvd_client_park(struct kvd *d, struct kvd_client *c)
{
	if (c->live_idx >= d->nr_active)
		return;
	live_swap(d, c->live_idx, --d->nr_active);
}

void kvd_client_kill(struct kvd *d, struct kvd_client *c, const char *why)
{
	if (c->state == KVD_CLIENT_DEAD || c->state == KVD_CLIENT_FREE)
		return;
	if (why && kvd_ratelimit(&d->rl_kill))
		kvd_warn("client %u (pid %d): disconnected: %s", c->id,
			 (int)c->pid, why);
	else if (c->state == KVD_CLIENT_LIVE)
		kvd_info("client %u (pid %d): gone, %u blocks released", c->id,
			 (int)c->pid, c->holder.nr_blocks);
	if (c->ns) {
		kvd_ns_release_all(c->ns, &c->holder);
		ns_put(d, c->ns);
		c->ns = NULL;
	}
	kvd_loop_cancel(d, c);
	pid_unwatch(c);
	shutdown(c->sock, SHUT_RDWR);
	close(c->sock);
	c->sock = -1;
	if (c->state == KVD_CLIENT_LIVE) {
		/* out of the polled part, then the last live slot (a
		 * parked one, or itself) takes its place */
		kvd_client_park(d, c);
		live_swap(d, c->live_idx, --d->nr_clients);
		d->tenants[c->tenant].nr_clients--;
	} else {
		d->nr_pending--;
	}
	c->state = KVD_CLIENT_DEAD;
	if (c->inflight == 0)
		client_free(c);
}

#define PID_BATCH	64

/* Kill the clients of @n watched pids whose process has exited. */
static void pids_check(struct kvd *d, struct pollfd *pfd,
		       struct kvd_client **who, unsigned n)
{
	if (!n || poll(pfd, n, 0) <= 0)
		return;
	for (unsigned i = 0; i < n; i++) {
		if (!pfd[i].revents)
			continue;
		kvd_info("client %u (pid %d): its process exited",
			 who[i]->id, (int)who[i]->pid);
		kvd_client_kill(d, who[i], NULL);
	}
}

/*
 * A client whose process exited: its socket is still open (else kvd
 * would have seen it close), in a child that inherited it. End the
 * client now, not when that child exits: one poll per tick, no op armed
 * per client in the event loop.
 */
static void clients_pid_tick(struct kvd *d)
{
	struct pollfd pfd[PID_BATCH];
	struct kvd_client *who[PID_BATCH];
	unsigned n = 0;

	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if ((c->state != KVD_CLIENT_HELLO &&
		     c->state != KVD_CLIENT_LIVE) || !c->pid_watched)
			continue;
		pfd[n] = (struct pollfd){ .fd = c->pidfd, .events = POLLIN };
		who[n++] = c;
		if (n == PID_BATCH) {
			pids_check(d, pfd, who, n);
			n = 0;
		}
	}
	pids_check(d, pfd, who, n);
}

/*
 * Has @c, which holds a lease, made a call since the last tick? SQEs
 * written (the SQ tail moved, served or not yet: a parked ring's doorbell
 * may wait behind this tick), served or CQEs reaped count, and so does
 * an SQE waiting in kvd for blocks (kv_alloc_wait): the client waits for
 * kvd, not kvd for it. A doorbell (any call that woke kvd, kv_heartbeat)
 * stamps seen_ns as it is read. Past its lease it is ended and its
 * blocks released: it is stopped or hung, and an operator could not get
 * them back otherwise. Only time kvd ran counts (@stall: see on_tick).
 */
static void lease_check(struct kvd *d, struct kvd_client *c, uint64_t now,
			uint64_t stall)
{
	uint32_t head = KV_READ_ONCE(*c->cq_khead);
	uint32_t tail = KV_READ_ONCE(*c->sq_ktail);
	char why[96];

	if (c->ops != c->seen_ops || head != c->seen_cq_head ||
	    tail != c->seen_sq_tail || c->nr_waits) {
		c->seen_ops = c->ops;
		c->seen_cq_head = head;
		c->seen_sq_tail = tail;
		c->seen_ns = now;
		return;
	}
	if (stall) {
		c->seen_ns = now - c->seen_ns > stall ? c->seen_ns + stall : now;
		return;
	}
	if (now - c->seen_ns <= c->lease_ms * 1000000ULL)
		return;
	snprintf(why, sizeof(why),
		 "lease expired: no call for %llu ms (lease %u ms), %u blocks released",
		 (unsigned long long)((now - c->seen_ns) / 1000000),
		 c->lease_ms, c->holder.nr_blocks);
	kvd_client_kill(d, c, why);
}

/* Pins that ended go (kvd/retain.c): their blocks cached, evictable. */
static void pins_tick(struct kvd *d, uint64_t now)
{
	for (uint32_t i = 0; i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live && d->ns[i].pins.nr)
			kvd_ns_pins_expire(&d->ns[i], now);
}

/*
 * Periodic: drop clients that never said HELLO, whose process exited or
 * whose lease expired; send extents that did not fit; end pins. A late tick
 * (d->tick_stall_ns) times nobody out: their HELLO or call may wait in
 * this very batch of completions.
 */
void kvd_clients_tick(struct kvd *d)
{
	uint64_t now = kvd_now_ns(), stall = d->tick_stall_ns;

	clients_pid_tick(d);
	pins_tick(d, now);

	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state == KVD_CLIENT_HELLO && stall)
			c->t_accept_ns += stall;
		else if (c->state == KVD_CLIENT_HELLO &&
		    now - c->t_accept_ns > d->cfg.hello_timeout_ms * 1000000ULL)
			kvd_client_kill(d, c, "no HELLO in time");
		else if (c->state == KVD_CLIENT_LIVE && c->lease_ms)
			lease_check(d, c, now, stall);
		if (c->state == KVD_CLIENT_LIVE && c->ext_behind)
			kvd_extents_send(d, c);
	}
}
