/* SPDX-License-Identifier: MIT */
/*
 * The daemon's state: configuration, the event loop (io_uring, or epoll
 * where io_uring is unavailable), the pool, namespaces, client slots and
 * admin connections. All arrays are sized at start-up from the
 * configuration. Each module's functions are declared in its own header
 * (client.h, ring.h, loop.h, ...); this one holds struct kvd alone.
 */
#ifndef KVD_DAEMON_H
#define KVD_DAEMON_H

#include "admin.h"
#include "config.h"
#include "kvd.h"
#include "ns.h"
#include "opdef.h"
#include "pool.h"
#include "tenant.h"
#include "tier.h"

/* struct kvd_config, the configuration: config.h */

struct kvd {
	struct kvd_config cfg;
	struct kvd_conf	conf;		/* kvd.conf as last loaded (may be empty) */
	char		*conf_path;	/* the file read, NULL if none */
	struct kvd_tenant tenants[KVD_MAX_TENANTS];
	const struct kvd_loop_ops *loop;	/* the event loop's backend */
	void		*loop_priv;	/* its state (loop_uring.c, loop_epoll.c) */
	/* the dispatcher (loop.c): every completion, from either backend;
	 * false: the op must end now (an accept out of fds) */
	bool		(*loop_done)(struct kvd *d, uint64_t user_data, int res,
				     bool more);
	uint64_t	loop_cur;	/* user_data being dispatched, or 0 */
	struct kvd_pool	pool;
	const struct kvd_backend *be;	/* where the pool lives (backend.h) */
	struct kvd_cuda	*cuda;		/* the cuda backend's state */
	void		*pool_map;	/* kvd's view of the pool (a device
					 * address on cuda: never dereferenced) */
	uint64_t	backed_bytes;	/* of it, backed by memory now */
	struct kvd_tier	host_tier;	/* behind the pool (tier.c) */
	struct kvd_tier	disk_tier;	/* behind it (tier_disk.c) */
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
	struct kvd_path_id sock_id, admin_id;	/* the sockets kvd bound */
	uint64_t	start_ns;
	uint64_t	ops;
	/* per KV_OP_*, SQEs taken off the rings (ring.c take) */
	struct kvd_op_stat op_stats[KV_OP__MAX];
	struct kvd_metrics *metrics;	/* --metrics-listen (metrics_http.c) */
	struct kvd_events *events;	/* --kv-events (events.c) */

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
	/* the sequences behind client and namespace numbers, which are
	 * shown permuted by id_key (random per start, kvd_next_id): a
	 * client learns nothing of other tenants' connections or
	 * namespaces from its own numbers */
	uint32_t	next_client_id;
	uint32_t	next_ns_handle;
	uint32_t	id_key[3];
	uint64_t	boot_id;	/* random per start: WELCOME's boot_id */
	struct kvd_ns	*ns;		/* [cfg.max_namespaces] */
	uint32_t	nr_ns;
	struct kvd_admin_conn adm[KVD_MAX_ADMIN];
	void		*scratch;	/* private copies of request arrays */
	/* random per start: the keys of per-uid tenants */
	uint8_t		secret[KVD_SECRET_BYTES];

	bool		accept_paused[2];	/* out of fds: re-armed by the tick */
	/*
	 * tick_ns: when the last tick ran. tick_stall_ns: by how much this
	 * tick came late (kvd stopped, swapped, starved), 0 if on time: kvd
	 * saw no call meanwhile, so time-outs skip it (loop.c, on_tick).
	 */
	uint64_t	tick_ns;
	uint64_t	tick_stall_ns;
	struct kvd_ratelimit rl_full, rl_kill, rl_accept, rl_ext;
	struct kvd_ratelimit rl_quota;	/* -EDQUOT refusals (opdef.c) */
	uint8_t		sigbuf[128];	/* struct signalfd_siginfo */
};

/* main.c */
int kvd_reload(struct kvd *d, char *msg, size_t len);

#endif /* KVD_DAEMON_H */
