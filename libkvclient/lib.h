/* SPDX-License-Identifier: MIT */
/* libkvclient internals: the client handle and ring pointers. */
#ifndef KV_LIB_H
#define KV_LIB_H

#include <errno.h>
#include <kv/kv.h>
#include <kv/barrier.h>

struct kv_client {
	int		sock;		/* control socket: closing it ends us */
	int		ring_fd;
	int		sq_evfd;	/* doorbell to kvd */
	int		cq_evfd;	/* kvd's wake-up */
	bool		dead;		/* kvd went away: every call fails */
	/* A call returned -ECONNRESET: only now do block addresses go, so
	 * that ids kvd gave before it went stay usable until the caller
	 * has been told (kv_block_ptr(3)). */
	bool		reset_told;

	void		*ring;
	size_t		ring_bytes;
	void		*pool;		/* the reserved range; extents mapped in */
	uint64_t	pool_bytes;
	uint64_t	extent_bytes;
	uint32_t	nr_extents;
	uint32_t	*ext_gen;	/* gen mapped per extent, 0: none */
	uint64_t	*ext_bytes;	/* bytes mapped per extent */
	int		export_kind;	/* KV_EXPORT_* */
	int		device;		/* our ordinal of kvd's GPU, -1 host */
	int		kvd_device;	/* kvd's ordinal of it */
	struct kv_cuda	*cuda;		/* cuda backend state (cuda.c) */
	char		why[160];	/* the last mapping failure, for errbuf */
	char		last_error[KV_ERRMSG_MAX]; /* kv_last_error (seq.c) */
	uint64_t	block_bytes;
	uint64_t	slab_bytes;
	uint32_t	max_blocks;
	uint32_t	client_id;
	uint32_t	ns_id;
	uint64_t	boot_id;	/* WELCOME's: which kvd run this is */
	int		backend;
	unsigned	block_tokens;	/* from the geometry: for kv_seq */
	bool		opaque;		/* KV_DTYPE_OPAQUE namespace */
	uint32_t	max_context;	/* kv_ctx_info: tokens, 0 none */
	uint32_t	ctx_refused;	/* 1 << kind the namespace refuses */
	struct kv_ctx_policy ctx_default;	/* kv_seq_open's policy */
	char		ctx_why[192];	/* why a policy was refused (seq_ctx.c) */
	uint32_t	last_cqe_flags;	/* of the last sync request (tier hits) */
	int		hash_algo;
	uint64_t	spin_ns;	/* poll window before sleeping (queue.c) */
	uint64_t	spin_cur_ns;	/* the window now: halves when spinning
					 * did not catch the reply */
	bool		woke_kvd;	/* rang the doorbell since the last spin */
	uint32_t	spin_skips;	/* waits since spinning was turned off */
	uint64_t	syscalls;	/* system calls made for this client */
	int64_t		call_timeout_ns; /* sync calls' wait, -1: for ever */
	int64_t		beat_ns;	/* lease_ms / 4, 0: no lease: how
					 * often a sleeping wait beats */
	int64_t		last_beat_ns;	/* last heartbeat (queue.c) */
	struct kv_sqe	orphan;		/* the last of them: the refs its late
					 * completion took are given back */
	uint32_t	sync_orphans;	/* timed-out sync requests still in
					 * flight: their CQEs are dropped */

	uint32_t	*sq_khead, *sq_ktail, *sq_kflags;
	uint32_t	sq_head_seen;	/* sq_khead when last read: kvd's line,
					 * read again only when the SQ looks full */
	uint32_t	*cq_khead, *cq_ktail, *cq_kflags;
	struct kv_sqe	*sqes;
	struct kv_cqe	*cqes;
	uint8_t		*data;
	uint32_t	data_bytes;
	uint32_t	sq_entries, cq_entries;
	uint32_t	sq_tail;	/* next SQE to hand out (local) */
	uint32_t	sq_submitted;	/* published to sq_ktail */
	uint32_t	inflight;	/* submitted, CQE not yet seen */
};

int __kv_wait(struct kv_client *c, int64_t timeout_ns);
int __kv_recv_extents(struct kv_client *c);
int __kv_reset(struct kv_client *c);
bool __kv_kvd_gone(struct kv_client *c);
void __kv_extents_pending(struct kv_client *c);
int __kv_sync_op(struct kv_client *c, struct kv_sqe *proto);
int __kv_failed(struct kv_client *c, const char *fn, int ret);
/* As __kv_failed, with @why (a static string, or NULL) after the errno. */
int __kv_failed_why(struct kv_client *c, const char *fn, int ret,
		    const char *why);

/* cuda.c: the cuda backend's mappings and the device-write fence */
int __kv_cuda_attach(struct kv_client *c, const struct kv_welcome *w);
int __kv_cuda_map(struct kv_client *c, uint32_t e, uint64_t off,
		  uint64_t bytes, int fd);
void __kv_cuda_unmap(struct kv_client *c, uint32_t e, uint64_t off,
		     uint64_t bytes);
int __kv_cuda_fence(struct kv_client *c);
void __kv_cuda_detach(struct kv_client *c);

#endif /* KV_LIB_H */
