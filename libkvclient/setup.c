// SPDX-License-Identifier: MIT
/*
 * kv_connect / kv_disconnect: HELLO, WELCOME with four fds by SCM_RIGHTS,
 * then the ring and the pool mapped into this process. The handshake has
 * a deadline (a stopped kvd still accepts into its backlog); every fd is
 * close-on-exec, and kv_disconnect shuts the socket down, so no copy of
 * it in a child keeps the connection alive.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

#define KV_DEFAULT_SQ_ENTRIES	256
#define KV_DEFAULT_DATA_BYTES	(256U << 10)

static void set_err(const struct kv_connect_params *p, const char *fmt,
		    const char *arg)
{
	if (p->errbuf && p->errbuf_len)
		snprintf(p->errbuf, p->errbuf_len, fmt, arg);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Let @fd's blocking calls of @opt (SO_SNDTIMEO: connect and send;
 * SO_RCVTIMEO: recv) wait until @deadline (ms, CLOCK_MONOTONIC; < 0: for
 * ever). -ETIMEDOUT when it has passed already.
 */
static int sock_deadline(int fd, int opt, int64_t deadline)
{
	struct timeval tv = { 0 };
	int64_t left;

	if (deadline < 0)
		return 0;
	left = deadline - now_ms();
	if (left <= 0)
		return -ETIMEDOUT;
	tv.tv_sec = left / 1000;
	tv.tv_usec = (left % 1000) * 1000;
	if (setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv)))
		return -errno;
	return 0;
}

/*
 * -errno of a failed socket call on the (blocking) control socket before
 * WELCOME: one whose SO_SNDTIMEO / SO_RCVTIMEO ran out says EAGAIN.
 */
static int sock_err(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINPROGRESS ?
	       -ETIMEDOUT : -errno;
}

static int socket_path(const struct kv_connect_params *p, char *buf,
		       size_t len)
{
	const char *e = getenv("KVD_SOCKET"), *xdg;
	int n;

	if (p->socket_path)
		n = snprintf(buf, len, "%s", p->socket_path);
	else if (e && *e)
		n = snprintf(buf, len, "%s", e);
	else if (geteuid() == 0 || !(xdg = getenv("XDG_RUNTIME_DIR")) || !*xdg)
		n = snprintf(buf, len, "/run/kvd/kvd.sock");
	else
		n = snprintf(buf, len, "%s/kvd.sock", xdg);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Connect to kvd's socket, whose path goes to @sa, by @deadline. */
static int dial(const struct kv_connect_params *p, struct sockaddr_un *sa,
		int64_t deadline)
{
	int fd, ret;

	ret = socket_path(p, sa->sun_path, sizeof(sa->sun_path));
	if (ret)
		return ret;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ret = sock_deadline(fd, SO_SNDTIMEO, deadline);
	if (!ret && connect(fd, (struct sockaddr *)sa, sizeof(*sa)))
		ret = sock_err();
	if (ret) {
		set_err(p, ret == -ETIMEDOUT ?
			"kvd at %s did not accept the connection in time (backlog full: is it stopped?)" :
			"cannot connect to kvd at %s", sa->sun_path);
		close(fd);
		return ret;
	}
	return fd;
}

static int send_hello(int fd, const struct kv_connect_params *p)
{
	struct kv_hello h = { 0 };

	h.magic = KV_MAGIC;
	h.abi_major = KV_ABI_MAJOR;
	h.abi_minor = KV_ABI_MINOR;
	h.type = KV_MSG_HELLO;
	h.size = sizeof(h);
	h.sq_entries = p->sq_entries ? p->sq_entries : KV_DEFAULT_SQ_ENTRIES;
	h.data_bytes = p->data_bytes ? p->data_bytes : KV_DEFAULT_DATA_BYTES;
	memcpy(h.model_id, p->model_id, strlen(p->model_id));
	if (p->model_rev)
		memcpy(h.model_rev, p->model_rev, strlen(p->model_rev));
	h.geom = p->geom;
	h.lease_ms = (uint32_t)p->lease_ms;
	if (send(fd, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h))
		return sock_err();
	return 0;
}

/* The pool comes as extents (memfd, vmm) or as one legacy IPC handle. */
static bool welcome_export_ok(const struct kv_welcome *w)
{
	bool ext = w->features & KV_FEAT_EXTENTS;

	switch (w->export_kind) {
	case KV_EXPORT_MEMFD:
		return w->backend == KV_BACKEND_HOST && ext;
	case KV_EXPORT_VMM:
		return w->backend == KV_BACKEND_CUDA && ext;
	case KV_EXPORT_LEGACY:
		return w->backend == KV_BACKEND_CUDA && !ext &&
		       w->nr_extents == 1;
	}
	return false;
}

/* Ours, or the shorter one of a kvd before ABI 3.3 (no ctx_default:
 * the caller zeroed it, which reads as policy none). */
static bool welcome_size_ok(const struct kv_welcome *w, ssize_t n)
{
	if (n == (ssize_t)sizeof(*w))
		return true;
	return n == (ssize_t)KV_WELCOME_SIZE_3_2 &&
	       w->abi_major == KV_ABI_MAJOR && w->abi_minor < 3;
}

/* Receive WELCOME and its three fds. Closes any fds on error. */
static int recv_welcome(int fd, struct kv_welcome *w, int fds[3])
{
	char cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct iovec iov = { .iov_base = w, .iov_len = sizeof(*w) };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *cm;
	ssize_t n;
	int nfds = 0;

	n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return sock_err();
	cm = CMSG_FIRSTHDR(&msg);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		if (nfds > 3)
			nfds = 3;
		memcpy(fds, CMSG_DATA(cm), nfds * sizeof(int));
	}
	if (n == 0)
		goto err_close;		/* kvd closed: refused or gone */
	if (!welcome_size_ok(w, n) || w->magic != KV_MAGIC ||
	    w->type != KV_MSG_WELCOME || (msg.msg_flags & MSG_CTRUNC)) {
		n = -EPROTO;
		goto err_close;
	}
	if (w->status) {
		n = w->status < 0 ? w->status : -EPROTO;
		goto err_close;
	}
	if (nfds != 3 || !welcome_export_ok(w) || !w->nr_extents ||
	    !w->extent_bytes || w->extent_bytes % KV_PAGE_BYTES ||
	    (uint64_t)(w->nr_extents - 1) * w->extent_bytes >= w->pool_bytes) {
		n = -EPROTO;
		goto err_close;
	}
	return 0;

err_close:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return n == 0 ? -ECONNRESET : (int)n;
}

static int map_ring(struct kv_client *c, const struct kv_welcome *w)
{
	const struct kv_ring_offsets *o = &w->ring;
	char *r;

	if (!o->sq_entries || o->sq_entries & (o->sq_entries - 1) ||
	    !o->cq_entries || o->cq_entries & (o->cq_entries - 1) ||
	    o->data + (uint64_t)o->data_bytes > o->ring_bytes)
		return -EPROTO;
	r = mmap(NULL, o->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		 c->ring_fd, 0);
	if (r == MAP_FAILED)
		return -errno;
	c->ring = r;
	c->ring_bytes = o->ring_bytes;
	c->sq_khead = (uint32_t *)(r + o->sq_head);
	c->sq_ktail = (uint32_t *)(r + o->sq_tail);
	c->sq_kflags = (uint32_t *)(r + o->sq_flags);
	c->cq_khead = (uint32_t *)(r + o->cq_head);
	c->cq_ktail = (uint32_t *)(r + o->cq_tail);
	c->cq_kflags = (uint32_t *)(r + o->cq_flags);
	c->sqes = (struct kv_sqe *)(r + o->sqes);
	c->cqes = (struct kv_cqe *)(r + o->cqes);
	c->data = (uint8_t *)(r + o->data);
	c->data_bytes = o->data_bytes;
	c->sq_entries = o->sq_entries;
	c->cq_entries = o->cq_entries;
	c->sq_tail = c->sq_submitted = KV_READ_ONCE(*c->sq_ktail);
	c->sq_head_seen = kv_smp_load_acquire(c->sq_khead);
	return 0;
}

/*
 * One address range for the pool, extents mapped into it as kvd sends
 * them: host memory here, device memory for cuda (cuda.c).
 */
static int map_pool(struct kv_client *c, const struct kv_welcome *w)
{
	int ret;

	c->ext_gen = calloc(c->nr_extents, sizeof(*c->ext_gen));
	c->ext_bytes = calloc(c->nr_extents, sizeof(*c->ext_bytes));
	if (!c->ext_gen || !c->ext_bytes)
		return -ENOMEM;
	if (c->backend == KV_BACKEND_CUDA) {
		ret = __kv_cuda_attach(c, w);
		if (ret)
			return ret;
		if (c->export_kind == KV_EXPORT_LEGACY) {
			c->ext_gen[0] = 1;
			c->ext_bytes[0] = c->pool_bytes;
		}
		return 0;
	}
	c->pool = mmap(NULL, c->pool_bytes, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (c->pool == MAP_FAILED) {
		c->pool = NULL;
		snprintf(c->why, sizeof(c->why),
			 "cannot reserve %llu bytes of address space",
			 (unsigned long long)c->pool_bytes);
		return -ENOMEM;
	}
	return 0;
}

static void unmap_pool(struct kv_client *c)
{
	if (c->cuda)
		__kv_cuda_detach(c);
	else if (c->pool)
		munmap(c->pool, c->pool_bytes);
	c->pool = NULL;
	free(c->ext_gen);
	free(c->ext_bytes);
	c->ext_gen = NULL;
	c->ext_bytes = NULL;
}

/* What is wrong with @p, in words; NULL when nothing is. */
static const char *params_wrong(const struct kv_connect_params *p)
{
	size_t len = strlen(p->model_id);

	if (!len || len >= KV_MODEL_ID_MAX)
		return "model_id must be 1..63 bytes";
	if (p->model_rev && strlen(p->model_rev) >= KV_MODEL_REV_MAX)
		return "model_rev must be at most 31 bytes";
	if (p->sq_entries && (p->sq_entries & (p->sq_entries - 1) ||
			      p->sq_entries > KV_MAX_SQ_ENTRIES))
		return "sq_entries must be a power of two up to 4096";
	if (p->data_bytes && (p->data_bytes % 4096 ||
			      p->data_bytes > KV_MAX_DATA_BYTES))
		return "data_bytes must be a multiple of 4096 up to 16 MiB";
	if (!kv_geometry_block_bytes(&p->geom))
		return "geometry: a count is 0, or the dtype or quantization is unknown";
	if (p->hash_algo != KV_HASH_XXH3_128 && p->hash_algo != KV_HASH_SHA256)
		return "unknown hash_algo";
	if (p->spin_us > KV_MAX_SPIN_US)
		return "spin_us above 100000";
	if (p->call_timeout_ms < 0)
		return "call_timeout_ms must be >= 0";
	if (p->lease_ms && (p->lease_ms < KV_LEASE_MIN_MS ||
			    p->lease_ms > KV_LEASE_MAX_MS))
		return "lease_ms must be 0 or 1000..86400000";
	return NULL;
}

static int check_params(const struct kv_connect_params *p)
{
	const char *why;

	if (!p || !p->model_id)
		return -EINVAL;
	why = params_wrong(p);
	if (why) {
		set_err(p, "%s", why);
		return -EINVAL;
	}
	return 0;
}

/* When the handshake must be done (ms, CLOCK_MONOTONIC), -1: never. */
static int64_t connect_deadline(const struct kv_connect_params *p)
{
	if (p->connect_timeout_ms < 0)
		return -1;
	return now_ms() + (p->connect_timeout_ms ? p->connect_timeout_ms :
			   KV_DEFAULT_CONNECT_TIMEOUT_MS);
}

/* The lower of two limits where 0 is none. */
static uint32_t lower_limit(uint32_t a, uint32_t b)
{
	if (!a || !b)
		return a ? a : b;
	return a < b ? a : b;
}

int kv_connect(const struct kv_connect_params *p, struct kv_client **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_welcome w;
	struct kv_client *c;
	int64_t deadline;
	int fds[3], ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	ret = check_params(p);
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	deadline = connect_deadline(p);
	c->sock = dial(p, &sa, deadline);
	if (c->sock < 0) {
		ret = c->sock;
		goto err_free;
	}
	/* kvd may have refused and closed already: its WELCOME still waits. */
	ret = send_hello(c->sock, p);
	if (ret && ret != -EPIPE && ret != -ECONNRESET)
		goto err_close_sock;
	memset(&w, 0, sizeof(w));
	ret = sock_deadline(c->sock, SO_RCVTIMEO, deadline);
	if (!ret)
		ret = recv_welcome(c->sock, &w, fds);
	if (ret) {
		if (w.magic == KV_MAGIC && w.errmsg[0]) {
			w.errmsg[sizeof(w.errmsg) - 1] = 0;
			set_err(p, "kvd refused: %s", w.errmsg);
		}
		goto err_close_sock;
	}
	/* From here on the socket is only read with MSG_DONTWAIT. */
	c->ring_fd = fds[0];
	c->sq_evfd = fds[1];
	c->cq_evfd = fds[2];
	ret = map_ring(c, &w);
	if (ret)
		goto err_close_fds;
	c->pool_bytes = w.pool_bytes;
	c->extent_bytes = w.extent_bytes;
	c->nr_extents = w.nr_extents;
	c->backend = (int)w.backend;
	c->export_kind = (int)w.export_kind;
	c->device = -1;
	c->kvd_device = w.backend == KV_BACKEND_CUDA ? w.device : -1;
	ret = map_pool(c, &w);
	if (!ret && c->export_kind != KV_EXPORT_LEGACY)
		ret = __kv_recv_extents(c);
	if (ret < 0) {
		set_err(p, "cannot map kvd's pool: %s",
			c->why[0] ? c->why : "extents refused");
		unmap_pool(c);
		goto err_unmap_ring;
	}
	c->block_bytes = w.block_bytes;
	c->slab_bytes = w.slab_bytes;
	c->max_blocks = w.max_blocks;
	c->client_id = w.client_id;
	c->ns_id = w.ns_id;
	c->boot_id = w.boot_id;
	c->block_tokens = p->geom.block_tokens;
	c->opaque = p->geom.dtype == KV_DTYPE_OPAQUE;
	c->max_context = lower_limit(p->max_context, w.max_context);
	c->ctx_refused = w.ctx_refused;
	c->ctx_default = w.ctx_default;
	c->hash_algo = p->hash_algo;
	c->spin_ns = p->spin_us < 0 ? 0 : (uint64_t)(p->spin_us ? p->spin_us :
				KV_DEFAULT_SPIN_US) * 1000;
	c->spin_cur_ns = c->spin_ns;
	c->call_timeout_ns = p->call_timeout_ms ?
			     (int64_t)p->call_timeout_ms * 1000000 : -1;
	c->beat_ns = (int64_t)p->lease_ms * 250000;	/* a quarter */
	*out = c;
	return 0;

err_unmap_ring:
	munmap(c->ring, c->ring_bytes);
err_close_fds:
	for (int i = 0; i < 3; i++)
		close(fds[i]);
err_close_sock:
	if (ret == -ETIMEDOUT)
		set_err(p, "kvd at %s accepted the connection but did not answer HELLO in time (is it stopped or wedged?)",
			sa.sun_path);
	close(c->sock);
err_free:
	free(c);
	return ret;
}

int kv_disconnect(struct kv_client *c)
{
	if (!c)
		return -EINVAL;
	unmap_pool(c);
	munmap(c->ring, c->ring_bytes);
	close(c->cq_evfd);
	close(c->sq_evfd);
	close(c->ring_fd);
	/*
	 * Ending the control socket is what tells kvd we are gone. Shut it
	 * down first: a child forked since kv_connect holds a copy of it,
	 * and close alone would leave the connection (and every block it
	 * holds) alive until that child exits.
	 */
	shutdown(c->sock, SHUT_RDWR);
	close(c->sock);
	free(c);
	return 0;
}

int kv_pool_info(const struct kv_client *c, struct kv_pool_info *info)
{
	if (!c || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->backend = c->backend;
	info->device = c->device;
	info->kvd_device = c->kvd_device;
	info->export_kind = c->export_kind;
	info->base = c->pool;
	info->pool_bytes = c->pool_bytes;
	info->block_bytes = c->block_bytes;
	info->slab_bytes = c->slab_bytes;
	info->max_blocks = c->max_blocks;
	info->client_id = c->client_id;
	info->ns_id = c->ns_id;
	return 0;
}

uint64_t kv_boot_id(const struct kv_client *c)
{
	return c ? c->boot_id : 0;
}

/*
 * Pure arithmetic, except the first time a block of an extent that kvd
 * has sent but this process has not mapped yet is asked for: kvd sends
 * an extent before any completion names a block inside it, so the
 * message is already queued on the control socket.
 */
void *kv_block_ptr(const struct kv_client *c, kv_block_t id)
{
	struct kv_client *mc = (struct kv_client *)c;
	uint64_t off;

	if (!c || id >= c->max_blocks || c->reset_told)
		return NULL;
	__kv_extents_pending(mc);
	off = (uint64_t)id * c->block_bytes;
	if (!c->ext_gen[off / c->extent_bytes] ||
	    !c->ext_gen[(off + c->block_bytes - 1) / c->extent_bytes]) {
		__kv_recv_extents(mc);
		if (!c->ext_gen[off / c->extent_bytes] ||
		    !c->ext_gen[(off + c->block_bytes - 1) / c->extent_bytes])
			return NULL;
	}
	return (uint8_t *)c->pool + off;
}

/*
 * kvd sent extents (maybe a newer memfd of one we map): read them,
 * clearing the flag first so that a later one is not missed. One load
 * when there is nothing; called on every submit and block lookup, so
 * the socket never fills up with unread extents.
 */
void __kv_extents_pending(struct kv_client *c)
{
	if (!(KV_READ_ONCE(*c->sq_kflags) & KV_SQ_EXTENTS))
		return;
	kv_atomic_andnot(c->sq_kflags, KV_SQ_EXTENTS);
	__kv_recv_extents(c);
}

/* Map extent @e's fd at its pool offset, or (fd < 0) unmap it. */
static int map_extent(struct kv_client *c, const struct kv_extent_msg *m,
		      int fd)
{
	uint8_t *at = (uint8_t *)c->pool + m->offset;
	int ret = 0;

	if (fd < 0) {
		if (!c->ext_gen[m->index])
			return 0;
		if (c->cuda)
			__kv_cuda_unmap(c, m->index, m->offset,
					c->ext_bytes[m->index]);
		else
			mmap(at, c->ext_bytes[m->index], PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
			     MAP_FIXED, -1, 0);
		c->ext_gen[m->index] = 0;
		return 0;
	}
	if (c->cuda) {
		ret = __kv_cuda_map(c, m->index, m->offset, m->bytes, fd);
	} else if (mmap(at, m->bytes, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		ret = -errno;
		snprintf(c->why, sizeof(c->why), "mmap of a pool extent: %s",
			 strerror(-ret));
	}
	if (ret)
		return ret;
	c->ext_gen[m->index] = m->gen ? m->gen : 1;
	c->ext_bytes[m->index] = m->bytes;
	return 0;
}

/*
 * Map (or unmap, KV_EXTENT_DROP) every EXTENT message queued on the
 * control socket. Returns the number handled, or -ECONNRESET when kvd
 * closed the socket (the client is then dead), -EMFILE when the fd did
 * not fit in this process, -EBADF when it never came (something between
 * us strips SCM_RIGHTS), or the mapping's error.
 */
int __kv_recv_extents(struct kv_client *c)
{
	int n = 0;

	for (;;) {
		char cbuf[CMSG_SPACE(sizeof(int))];
		struct kv_extent_msg m;
		struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
		struct msghdr msg = {
			.msg_iov = &iov, .msg_iovlen = 1,
			.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
		};
		struct cmsghdr *cm;
		bool drop;
		ssize_t r;
		int fd = -1, ret;

		c->syscalls++;
		r = recvmsg(c->sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (r < 0 && errno != ECONNRESET)
			return errno == EAGAIN ? n : -errno;
		if (r <= 0) {
			c->dead = true;
			return -ECONNRESET;
		}
		cm = CMSG_FIRSTHDR(&msg);
		if (cm && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
		drop = r == sizeof(m) && (m.flags & KV_EXTENT_DROP);
		if (r != sizeof(m) || m.magic != KV_MAGIC ||
		    m.type != KV_MSG_EXTENT || m.index >= c->nr_extents ||
		    m.offset != (uint64_t)m.index * c->extent_bytes ||
		    !m.bytes || m.bytes > c->extent_bytes ||
		    m.offset + m.bytes > c->pool_bytes ||
		    (drop && fd >= 0)) {
			if (fd >= 0)
				close(fd);
			continue;	/* not for us: skip it */
		}
		if (!drop && fd < 0) {
			ret = msg.msg_flags & MSG_CTRUNC ? -EMFILE : -EBADF;
			snprintf(c->why, sizeof(c->why), "%s",
				 ret == -EMFILE ?
				 "out of file descriptors: a pool extent's fd was dropped" :
				 "a pool extent came without its fd (is SCM_RIGHTS filtered?)");
			return ret;
		}
		ret = map_extent(c, &m, drop ? -1 : fd);
		if (fd >= 0)
			close(fd);	/* the mapping keeps the extent */
		if (ret)
			return ret;
		n++;
	}
}

void *kv_data_ptr(const struct kv_client *c, uint32_t off, uint32_t len)
{
	if (!c || (uint64_t)off + len > c->data_bytes)
		return NULL;
	return c->data + off;
}

uint64_t kv_syscalls(const struct kv_client *c)
{
	return c ? c->syscalls : 0;
}

uint32_t kv_data_bytes(const struct kv_client *c)
{
	return c ? c->data_bytes : 0;
}
