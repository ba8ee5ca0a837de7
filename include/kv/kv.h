/* SPDX-License-Identifier: MIT */
/*
 * libkvclient: the client side of kvd.
 *
 * An engine process connects once per model (kv_connect), maps the pool,
 * and then asks kvd for blocks through a request ring in shared memory:
 * synchronously (kv_alloc, kv_release, kv_ref, kv_stats) or in batches
 * through the liburing-shaped interface (kv_get_sqe, kv_prep_*, kv_submit,
 * kv_wait_cqe, kv_cqe_seen).
 *
 * Conventions, for every function below:
 *  - Errors are returned as -errno; errno is never read or set.
 *  - A struct kv_client is not thread-safe: use it from one thread at a
 *    time, or one client per thread (as with a struct io_uring).
 *  - Block ids are kv_block_t; a block's bytes are block_bytes long and
 *    start at the pool base + id * block_bytes (DESIGN.md "one address
 *    rule"), laid out [layer][K|V][kv_head][slot][head_dim].
 */
#ifndef KV_KV_H
#define KV_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <kv/abi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Block id: an index into the pool in units of the namespace's block_bytes. */
typedef uint32_t kv_block_t;

struct kv_client;

/* Parameters of kv_connect(). Zeroed fields take the documented default. */
struct kv_connect_params {
	const char	*socket_path;	/* NULL: $KVD_SOCKET, else /run/kvd/kvd.sock
					 * for root, $XDG_RUNTIME_DIR/kvd.sock otherwise */
	const char	*model_id;	/* required, 1..63 bytes */
	struct kv_geometry geom;	/* required */
	unsigned	sq_entries;	/* 0: 256; power of two up to 4096 */
	unsigned	data_bytes;	/* 0: 256 KiB; multiple of 4096, up to 16 MiB */
	char		*errbuf;	/* optional: kvd's reason when it refuses */
	size_t		errbuf_len;
};

/* What kv_pool_info() reports about the mapped pool. */
struct kv_pool_info {
	int		backend;	/* KV_BACKEND_HOST or KV_BACKEND_CUDA */
	int		device;		/* CUDA device ordinal, -1 on host */
	void		*base;		/* start of the pool mapping */
	uint64_t	pool_bytes;
	uint64_t	block_bytes;	/* this client's namespace */
	uint64_t	slab_bytes;
	uint32_t	max_blocks;	/* every id is < max_blocks */
	uint32_t	client_id;
	uint32_t	ns_id;
};

/* Setup and teardown (libkvclient/setup.c). */
int kv_connect(const struct kv_connect_params *p, struct kv_client **out);
int kv_disconnect(struct kv_client *c);
int kv_pool_info(const struct kv_client *c, struct kv_pool_info *info);
void *kv_block_ptr(const struct kv_client *c, kv_block_t id);

/* The data area: where id arrays of asynchronous requests live. */
void *kv_data_ptr(const struct kv_client *c, uint32_t off, uint32_t len);
uint32_t kv_data_bytes(const struct kv_client *c);

/* Asynchronous interface (libkvclient/queue.c). */
struct kv_sqe *kv_get_sqe(struct kv_client *c);
int kv_submit(struct kv_client *c);
int kv_submit_and_wait(struct kv_client *c, unsigned wait_nr);
int kv_wait_cqe(struct kv_client *c, struct kv_cqe **cqe);
int kv_wait_cqe_timeout(struct kv_client *c, struct kv_cqe **cqe,
			int64_t timeout_ns);
int kv_peek_cqe(struct kv_client *c, struct kv_cqe **cqe);
void kv_cqe_seen(struct kv_client *c, struct kv_cqe *cqe);
void kv_cq_advance(struct kv_client *c, unsigned nr);
unsigned kv_cq_ready(const struct kv_client *c);
unsigned kv_sq_space_left(const struct kv_client *c);

void kv_prep_nop(struct kv_sqe *sqe);
void kv_prep_alloc(struct kv_sqe *sqe, unsigned nr, uint32_t ids_off);
void kv_prep_release(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_ref(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_stats(struct kv_sqe *sqe, uint32_t stats_off);
void kv_sqe_set_data64(struct kv_sqe *sqe, uint64_t data);

/* Synchronous wrappers (libkvclient/ops.c): one round trip each. */
int kv_nop(struct kv_client *c);
int kv_alloc(struct kv_client *c, unsigned nr, kv_block_t *ids);
int kv_release(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_ref(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_stats(struct kv_client *c, struct kv_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KV_KV_H */
