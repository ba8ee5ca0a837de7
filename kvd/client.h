/* SPDX-License-Identifier: MIT */
/*
 * One client: its connection, HELLO/WELCOME, its ring mapping (daemon
 * side), what it holds, and its teardown when it goes.
 */
#ifndef KVD_CLIENT_H
#define KVD_CLIENT_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "ns.h"

/* Connections waiting to say HELLO get slots of their own, so silent
 * connections never take a client's slot; past this the oldest goes. */
#define KVD_MAX_PENDING	64

/* A parked SQE's state (ring.c). */
enum kvd_wait_state {
	KVD_WAIT_PARKED,	/* tried: waits for a free or its deadline */
	KVD_WAIT_LINKED,	/* waits for the entry before it to complete */
	KVD_WAIT_READY,		/* that one succeeded: to be tried now */
	KVD_WAIT_CANCEL,	/* that one failed: to complete -ECANCELED */
};

struct kvd_wait {
	struct kv_sqe	sqe;
	uint64_t	deadline_ns;	/* PARKED: -ETIMEDOUT from then on */
	int		state;		/* enum kvd_wait_state */
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
	pid_t		pid;		/* SO_PEERCRED: the process that connected */
	int		pidfd;		/* watches pid's exit, if pid_watched */
	bool		pid_watched;
	uid_t		uid;
	gid_t		gid;
	uint32_t	groups[32];	/* SO_PEERGROUPS, for tenant lookup */
	uint32_t	nr_groups;
	int		tenant;		/* index, -1 before HELLO */
	uint32_t	*ext_sent;	/* gen of each extent it has, 0: none */
	const char	*doomed;	/* to be disconnected after this pass */
	bool		ext_behind;	/* extents still to send (socket full) */
	uint64_t	ext_epoch;	/* d->ext_epoch when last brought up to date */
	/*
	 * SQEs taken off the SQ but not completed (ring.c): KV_SQE_WAIT
	 * requests waiting for blocks, and those linked behind one
	 * (KV_SQE_LINK), in the order taken; at most sq_entries, each
	 * with a CQ slot kept for it. SQEs behind them are served.
	 */
	struct kvd_wait	*waits;
	uint32_t	nr_waits;
	uint8_t		link;		/* what the next SQE taken is linked to */
	uint64_t	wait_frees;	/* pool->frees when last tried */
	/* a CQE held back until the client has the extents it may name */
	bool		cqe_deferred;
	int32_t		def_res;
	uint32_t	def_flags;
	uint32_t	cqe_flags;	/* the CQE flags of the op just issued */
	bool		no_fetch;	/* its disk-tier wait ran out (ring.c) */
	uint64_t	def_user_data;
	uint64_t	t_accept_ns;
	/*
	 * Its lease (HELLO lease_ms, 0: none): it promised a call at least
	 * this often. seen_ns: when kvd last saw one (the doorbell rang,
	 * SQEs written or served, CQEs reaped, or an SQE waiting in kvd),
	 * checked on the tick against seen_sq_tail, seen_ops, seen_cq_head.
	 */
	uint32_t	lease_ms;
	uint32_t	seen_cq_head;
	uint32_t	seen_sq_tail;
	uint64_t	seen_ns;
	uint64_t	seen_ops;

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
	uint64_t	evbuf;
	struct msghdr	msg;
	struct iovec	iov;
	union {
		struct kv_hello	hello;
		uint8_t		raw[sizeof(struct kv_hello) + 8];
	} rx;
};

struct kvd;

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
/*
 * The context settings a client of namespace (@tenant, @model_id,
 * @dtype) gets in WELCOME now: kvd.conf's max_context, refused kinds and
 * default policy. True when an opaque dtype turned the default to none.
 */
bool kvd_ns_ctx(const struct kvd *d, uint32_t tenant, const char *model_id,
		uint32_t dtype, uint32_t *max_context, uint32_t *refused,
		struct kv_ctx_policy *def);

#endif /* KVD_CLIENT_H */
