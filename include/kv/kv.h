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

/*
 * kv_connect - connect to kvd, say HELLO for model @p->model_id with
 * geometry @p->geom, map the ring and the pool. On success *out holds a
 * new client (free it with kv_disconnect). Errors: -EINVAL bad
 * parameters; -ENOENT / -ECONNREFUSED no kvd on the socket;
 * -ENAMETOOLONG socket path; -EPROTO ABI mismatch or malformed WELCOME;
 * -ECONNRESET kvd closed the connection; any -errno kvd's HELLO checks
 * give (-EINVAL geometry, -E2BIG block larger than half the pool,
 * -ENOSPC no namespace slot), with kvd's reason in p->errbuf; -ENOMEM.
 * Thread-safe (each call makes its own client).
 */
int kv_connect(const struct kv_connect_params *p, struct kv_client **out);

/*
 * kv_disconnect - unmap, close the control socket and free @c. kvd then
 * releases every block @c still holds. Returns 0, or -EINVAL for NULL.
 */
int kv_disconnect(struct kv_client *c);

/* kv_pool_info - fill @info (struct kv_pool_info). 0 or -EINVAL. */
int kv_pool_info(const struct kv_client *c, struct kv_pool_info *info);

/*
 * kv_block_ptr - address of block @id's block_bytes bytes in this
 * process's pool mapping, or NULL when id >= max_blocks. Pure arithmetic:
 * it does not check that @c holds the block.
 */
void *kv_block_ptr(const struct kv_client *c, kv_block_t id);

/*
 * kv_data_ptr - address of [@off, @off + @len) in the data area, where
 * asynchronous requests keep their id arrays (4-byte aligned offsets);
 * NULL when the range does not fit. kv_data_bytes - its size in bytes.
 */
void *kv_data_ptr(const struct kv_client *c, uint32_t off, uint32_t len);
uint32_t kv_data_bytes(const struct kv_client *c);

/*
 * Asynchronous interface, as liburing's: take SQEs with kv_get_sqe (NULL
 * when the SQ is full), fill them with kv_prep_*, publish them with
 * kv_submit (returns the number published or -errno; rings the doorbell
 * only when kvd sleeps), then reap CQEs with kv_peek_cqe (-EAGAIN if
 * none) or kv_wait_cqe / kv_wait_cqe_timeout (timeout in ns, -ETIME),
 * and hand each back with kv_cqe_seen or several with kv_cq_advance.
 * CQE res is a count or -errno (see the kv_prep_* pages). Calls that wait
 * return -ECONNRESET when kvd went away. One thread at a time per client.
 */
struct kv_sqe *kv_get_sqe(struct kv_client *c);
int kv_submit(struct kv_client *c);
int kv_submit_and_wait(struct kv_client *c, unsigned wait_nr);
int kv_wait_cqe(struct kv_client *c, struct kv_cqe **cqe);
int kv_wait_cqe_timeout(struct kv_client *c, struct kv_cqe **cqe,
			int64_t timeout_ns);
int kv_peek_cqe(struct kv_client *c, struct kv_cqe **cqe);
/* Up to @count ready CQEs, oldest first, into @cqes; returns how many. */
unsigned kv_peek_batch_cqe(struct kv_client *c, struct kv_cqe **cqes,
			   unsigned count);
void kv_cqe_seen(struct kv_client *c, struct kv_cqe *cqe);
void kv_cq_advance(struct kv_client *c, unsigned nr);
unsigned kv_cq_ready(const struct kv_client *c);
unsigned kv_sq_space_left(const struct kv_client *c);

/*
 * SQE preparation. Offsets are byte offsets into the data area; an id
 * array of nr ids spans nr * 4 bytes. ALLOC writes nr new ids there (all
 * or nothing); RELEASE drops one ref per listed id, REF adds one (the
 * caller must hold each id); STATS writes a struct kv_stats.
 */
void kv_prep_nop(struct kv_sqe *sqe);
void kv_prep_alloc(struct kv_sqe *sqe, unsigned nr, uint32_t ids_off);
void kv_prep_release(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_ref(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_stats(struct kv_sqe *sqe, uint32_t stats_off);
void kv_sqe_set_data64(struct kv_sqe *sqe, uint64_t data);

/*
 * Synchronous wrappers: one round trip each, using the start of the data
 * area, so -EBUSY while asynchronous requests are queued or in flight.
 * kv_alloc returns @nr with @nr ids in @ids (-ENOSPC pool exhausted, all
 * or nothing; -E2BIG more ids than the data area or the pool can hold);
 * kv_release / kv_ref return @nr (-EPERM an id not held, -EINVAL an id
 * outside the namespace; nothing changes on error); kv_stats and kv_nop
 * return 0. All return -ECONNRESET once kvd is gone.
 */
int kv_nop(struct kv_client *c);
int kv_alloc(struct kv_client *c, unsigned nr, kv_block_t *ids);
int kv_release(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_ref(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_stats(struct kv_client *c, struct kv_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KV_KV_H */
