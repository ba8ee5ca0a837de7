/* SPDX-License-Identifier: MIT */
/*
 * The daemon's state: configuration, the event loop (io_uring, or epoll
 * where io_uring is unavailable), the pool, namespaces, client slots and
 * admin connections. All arrays are sized at start-up from the
 * configuration.
 */
#ifndef KVD_DAEMON_H
#define KVD_DAEMON_H

#include <liburing.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "config.h"
#include "kvd.h"
#include "ns.h"
#include "pool.h"

#define KVD_MAX_TENANTS	256
#define KVD_BACKEND_AUTO	(-1)	/* cfg.backend: cuda if a device, else host */
#define KVD_TICK_MS	250		/* the event loop's periodic tick */

/* cfg.event_loop (--event-loop, $KVD_EVENT_LOOP) */
enum kvd_loop_kind {
	KVD_LOOP_AUTO = 0,	/* io_uring, else epoll with a warning */
	KVD_LOOP_IO_URING,
	KVD_LOOP_EPOLL,
};

struct kvd_tenant {
	bool		live;
	bool		configured;	/* from kvd.conf; else one per uid */
	bool		in_conf;	/* still in the file (admits clients) */
	uint32_t	id;		/* index in d->tenants */
	uint32_t	uid;		/* the uid of a per-uid tenant */
	char		name[KVD_CONF_NAME_MAX];
	uint64_t	seed;		/* mixed into its cache keys */
	struct kvd_acct	acct;		/* pages of all its namespaces */
	uint32_t	nr_clients;
};

struct kvd_config {
	const char	*conf_path;	/* NULL: KVD_CONF_PATH if it exists */
	const char	*user;		/* --user: drop privileges to it */
	bool		set[16];	/* given on the command line (CFG_*) */
	const char	*socket_path;
	const char	*admin_path;
	uint64_t	pool_bytes;
	int		backend;	/* KV_BACKEND_*, 0: auto */
	int		device;		/* cuda device ordinal */
	bool		device_set;	/* given on the command line */
	int		export_kind;	/* cuda: KV_EXPORT_VMM or _LEGACY */
	bool		hugepages;
	uint64_t	extent_bytes;	/* 0: pool / 32, within 2 MiB..1 GiB */
	uint32_t	max_clients;
	uint32_t	max_namespaces;
	uint32_t	max_ring_entries;	/* SQ entries a HELLO may ask */
	uint32_t	max_client_blocks;	/* refs per client, 0: no limit */
	uint32_t	poll_us;	/* poll busy rings this long before sleeping */
	bool		poll_set;
	uint32_t	sq_budget;	/* work per client per pass (ring.c) */
	uint32_t	hello_timeout_ms;
	int		event_loop;	/* KVD_LOOP_* */
};

enum kvd_client_state {
	KVD_CLIENT_FREE = 0,
	KVD_CLIENT_HELLO,	/* accepted, waiting for HELLO */
	KVD_CLIENT_LIVE,	/* WELCOME sent, ring served */
	KVD_CLIENT_DEAD,	/* torn down, waiting for its event-loop ops */
};

struct kvd_client {
	uint32_t	slot;
	uint32_t	live_idx;	/* its index in d->live while LIVE */
	bool		served;		/* since last_work_ns was stamped */
	uint64_t	last_work_ns;	/* its ring last had work (loop.c) */
	uint32_t	gen;		/* bumped on reuse; stale CQEs ignored */
	uint32_t	id;
	int		state;
	int		inflight;	/* event-loop ops naming this slot */
	int		sock;
	int		ring_fd;
	int		sq_evfd;	/* doorbell: client -> kvd */
	int		cq_evfd;	/* wake-up: kvd -> client */
	pid_t		pid;
	uid_t		uid;
	gid_t		gid;
	uint32_t	groups[32];	/* SO_PEERGROUPS, for tenant lookup */
	uint32_t	nr_groups;
	int		tenant;		/* index, -1 before HELLO */
	uint32_t	*ext_sent;	/* gen of each extent it has, 0: none */
	const char	*doomed;	/* to be disconnected after this pass */
	bool		ext_behind;	/* extents still to send (socket full) */
	uint64_t	ext_epoch;	/* d->ext_epoch when last brought up to date */
	/* an SQE with KV_SQE_WAIT waiting for blocks (ring.c) */
	bool		waiting;
	struct kv_sqe	wait_sqe;
	uint64_t	wait_deadline_ns;
	uint64_t	wait_frees;	/* pool->frees when last tried */
	/* a CQE held back until the client has the extents it may name */
	bool		cqe_deferred;
	int32_t		def_res;
	uint64_t	def_user_data;
	uint64_t	t_accept_ns;

	/* ring mapping, daemon side */
	void		*ring;
	size_t		ring_bytes;
	struct kv_ring_offsets off;
	uint32_t	*sq_khead, *sq_ktail, *sq_kflags;
	uint32_t	*cq_khead, *cq_ktail, *cq_kflags;
	struct kv_sqe	*sqes;
	struct kv_cqe	*cqes;
	uint8_t		*data;
	uint32_t	data_bytes;
	uint32_t	sq_entries, cq_entries;
	uint32_t	sq_head;	/* local copies of what kvd owns */
	uint32_t	cq_tail;
	uint32_t	cq_head_seen;	/* cq head when last read (ring.c) */
	bool		cq_stalled;	/* left SQEs for lack of CQ room */

	struct kvd_ns	*ns;
	struct kvd_holder holder;
	uint64_t	ops;

	/* buffers of the event-loop ops in flight */
	uint8_t		ep_armed;	/* epoll: ops armed, 1 << KVD_EV_* */
	uint8_t		ep_watched;	/* epoll: fds in the set, 1 << KVD_EV_* */
	uint64_t	evbuf;
	struct msghdr	msg;
	struct iovec	iov;
	union {
		struct kv_hello	hello;
		uint8_t		raw[sizeof(struct kv_hello) + 8];
	} rx;
};

#define KVD_MAX_ADMIN	32
/* Connections waiting to say HELLO get slots of their own, so silent
 * connections never take a client's slot; past this the oldest goes. */
#define KVD_MAX_PENDING	64

struct kvd_admin_conn {
	int		fd;
	uint32_t	gen;
	uint64_t	t_accept_ns;
	struct kv_admin_req req;
	uint8_t		pad[64];	/* detects an oversized request */
};

struct kvd {
	struct kvd_config cfg;
	struct kvd_conf	conf;		/* kvd.conf as last loaded (may be empty) */
	char		*conf_path;	/* the file read, NULL if none */
	struct kvd_tenant tenants[KVD_MAX_TENANTS];
	const struct kvd_loop_ops *loop;	/* the event loop's backend */
	struct io_uring	ring;
	int		ep_fd, tick_fd;	/* the epoll backend's */
	struct kvd_pool	pool;
	const struct kvd_backend *be;	/* where the pool lives (backend.h) */
	struct kvd_cuda	*cuda;		/* the cuda backend's state */
	void		*pool_map;	/* kvd's view of the pool (a device
					 * address on cuda: never dereferenced) */
	uint64_t	backed_bytes;	/* of it, backed by memory now */
	int		*ext_fd;	/* [nr_extents] exported fds, -1: unbacked */
	uint32_t	*ext_gen;	/* bumped each time an extent is backed */
	uint32_t	*ext_idle;	/* ticks an extent has had no page in use */
	bool		ext_lazy;	/* extents grow and shrink (extent.c) */
	uint64_t	ext_epoch;	/* bumped when an extent is (un)backed or claimed */
	bool		be_live;	/* be->init done, be->exit not yet */
	int		listen_fd;
	int		admin_fd;
	int		signal_fd;
	int		lock_fds[2];
	bool		stop;
	uint64_t	last_work_ns;	/* when a ring last had work (loop.c) */
	bool		served;		/* served since last_work_ns was read */
	bool		doomed;		/* some client has ->doomed set */
	bool		socket_bound, admin_bound;
	uint64_t	start_ns;
	uint64_t	ops;

	struct kvd_client *clients;	/* [nr_slots] */
	/* slots of the LIVE clients: the loop's passes walk these, not
	 * every slot (swap-removed on kill, so walk backwards). The first
	 * nr_active are polled; the rest were idle long enough to be
	 * parked, with KV_SQ_NEED_WAKEUP set: they ring the doorbell. */
	uint32_t	*live;		/* [nr_slots] */
	uint32_t	nr_slots;	/* max_clients + KVD_MAX_PENDING */
	uint32_t	nr_clients;	/* LIVE (WELCOME sent) */
	uint32_t	nr_active;	/* live[0, nr_active) are polled */
	uint32_t	nr_pending;	/* accepted, no HELLO yet */
	uint32_t	next_client_id;
	struct kvd_ns	*ns;		/* [cfg.max_namespaces] */
	uint32_t	nr_ns;
	struct kvd_admin_conn adm[KVD_MAX_ADMIN];
	void		*scratch;	/* private copies of request arrays */
	uint64_t	secret;		/* random per start: tenant keys */

	bool		accept_paused[2];	/* out of fds: re-armed by the tick */
	struct kvd_ratelimit rl_full, rl_kill, rl_accept, rl_ext;
	uint8_t		sigbuf[128];	/* struct signalfd_siginfo */
	struct __kernel_timespec tick;
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

/* client.c */
void kvd_client_accept(struct kvd *d, int fd);
void kvd_client_ctrl_done(struct kvd *d, struct kvd_client *c, int res);
void kvd_client_doorbell_done(struct kvd *d, struct kvd_client *c, int res);
void kvd_client_kill(struct kvd *d, struct kvd_client *c, const char *why);
void kvd_client_activate(struct kvd *d, struct kvd_client *c);
void kvd_client_park(struct kvd *d, struct kvd_client *c);
void kvd_client_put_op(struct kvd *d, struct kvd_client *c);
void kvd_clients_tick(struct kvd *d);
/* Check a HELLO datagram of @len bytes: 0, or -errno with *why set. */
int kvd_hello_check(struct kvd *d, const struct kv_hello *h, int len,
		    const char **why);

/* ring.c */
int kvd_ring_setup(struct kvd_client *c, uint32_t sq_entries,
		   uint32_t data_bytes);
void kvd_ring_teardown(struct kvd_client *c);
int kvd_ring_process(struct kvd *d, struct kvd_client *c, uint32_t budget);
bool kvd_ring_prepare_sleep(struct kvd_client *c);
bool kvd_ring_cq_reaped(struct kvd_client *c);
void kvd_ring_wake(struct kvd_client *c);

/* opdef.c */
int kvd_op_issue(struct kvd *d, struct kvd_client *c,
		 const struct kv_sqe *sqe);

/* extent.c */
int kvd_extents_create(struct kvd *d, uint64_t extent_bytes);
void kvd_extents_destroy(struct kvd *d);
void kvd_extents_send(struct kvd *d, struct kvd_client *c);
bool kvd_extents_current(struct kvd *d, struct kvd_client *c);
void kvd_extents_tick(struct kvd *d);
int kvd_extent_claim(struct kvd_pool *pool, uint32_t e, int32_t owner);

/* tenant.c */
void kvd_tenants_apply(struct kvd *d);
int kvd_tenant_of(struct kvd *d, uint32_t uid, uint32_t gid,
		  const uint32_t *groups, uint32_t nr_groups, const char **why);

/* main.c */
int kvd_reload(struct kvd *d, char *msg, size_t len);

/* admin.c */
void kvd_admin_accept(struct kvd *d, int fd);
void kvd_admin_recv_done(struct kvd *d, uint32_t slot, int res);
void kvd_admin_tick(struct kvd *d);
void kvd_admin_fill_status(struct kvd *d, struct kv_admin_status *st);

#endif /* KVD_DAEMON_H */
