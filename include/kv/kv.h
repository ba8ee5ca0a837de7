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
	const char	*model_rev;	/* NULL or a revision, 0..31 bytes */
	struct kv_geometry geom;	/* required */
	unsigned	sq_entries;	/* 0: 256; power of two up to 4096 */
	unsigned	data_bytes;	/* 0: 256 KiB; multiple of 4096, up to 16 MiB */
	char		*errbuf;	/* optional: kvd's reason when it refuses */
	size_t		errbuf_len;
	int		hash_algo;	/* enum kv_hash_algo for kv_seq; 0: XXH3-128 */
	int		spin_us;	/* waiting for a CQE: poll the ring this
					 * long before sleeping on the eventfd
					 * (0: KV_DEFAULT_SPIN_US; < 0: never) */
	/* Fields below were appended; new ones only ever go at the end. */
	int		connect_timeout_ms; /* kv_connect's whole handshake
					 * (connect, HELLO, WELCOME), in ms:
					 * -ETIMEDOUT after it (0:
					 * KV_DEFAULT_CONNECT_TIMEOUT_MS;
					 * < 0: wait for ever) */
	int		call_timeout_ms; /* each synchronous call's wait for
					 * its completion, in ms: -ETIMEDOUT
					 * after it (0: no timeout; < 0:
					 * -EINVAL) */
	int		lease_ms;	/* 0: none (the default): kvd keeps an
					 * idle client for ever. Else a
					 * promise to call kvd at least this
					 * often (KV_LEASE_MIN_MS..
					 * KV_LEASE_MAX_MS): any request,
					 * kv_heartbeat, or a wait (they beat
					 * by themselves); past it kvd ends
					 * the client and releases its
					 * blocks (calls then -ECONNRESET) */
	uint32_t	max_context;	/* tokens one kv_seq may hold (the
					 * model's context length); 0: none.
					 * kvd.conf's max_context of the
					 * namespace, if lower, wins */
};

/* Default connect timeout, in milliseconds. */
#define KV_DEFAULT_CONNECT_TIMEOUT_MS	10000

/* Default spin window of a waiting client, in microseconds. */
#define KV_DEFAULT_SPIN_US	50
#define KV_MAX_SPIN_US		100000

/* What kv_pool_info() reports about the mapped pool. */
struct kv_pool_info {
	int		backend;	/* KV_BACKEND_HOST or KV_BACKEND_CUDA */
	int		device;		/* this process's CUDA ordinal of kvd's
					 * GPU (it may differ from kvd's under
					 * CUDA_VISIBLE_DEVICES), -1 on host */
	void		*base;		/* start of the pool mapping: a host
					 * address, or a CUdeviceptr on cuda */
	uint64_t	pool_bytes;
	uint64_t	block_bytes;	/* this client's namespace */
	uint64_t	slab_bytes;
	uint32_t	max_blocks;	/* every id is < max_blocks */
	uint32_t	client_id;
	uint32_t	ns_id;
	int		export_kind;	/* KV_EXPORT_MEMFD, _VMM or _LEGACY */
	int		kvd_device;	/* kvd's ordinal of its GPU, -1 on host */
};

/*
 * kv_connect - connect to kvd, say HELLO for model @p->model_id with
 * geometry @p->geom, map the ring and the pool. On success *out holds a
 * new client (free it with kv_disconnect). Errors: -EINVAL bad
 * parameters; -ENOENT / -ECONNREFUSED no kvd on the socket;
 * -ENAMETOOLONG socket path; -EPROTO ABI mismatch or malformed WELCOME;
 * -ECONNRESET kvd closed the connection; -ETIMEDOUT kvd did not answer
 * within p->connect_timeout_ms (stopped or wedged); any -errno kvd's
 * HELLO checks give (-EINVAL geometry, -E2BIG block larger than half the
 * pool, -ENOSPC no namespace slot), with kvd's reason in p->errbuf;
 * -ENOMEM. Thread-safe (each call makes its own client). The client
 * belongs to the process that called kv_connect: kvd ends it when that
 * process exits, even if a child it forked still holds the socket.
 */
int kv_connect(const struct kv_connect_params *p, struct kv_client **out);

/*
 * kv_disconnect - shut down and close the control socket, unmap and free
 * @c. kvd then releases every block @c still holds, whatever copies of
 * the socket other processes (forked children) have. Returns 0, or
 * -EINVAL for NULL.
 */
int kv_disconnect(struct kv_client *c);

/*
 * kv_heartbeat - tell kvd this client is alive, for its lease
 * (kv_connect_params.lease_ms): one eventfd write, no request, no CQE.
 * Waits (kv_wait_cqe, the synchronous calls) beat by themselves while
 * they sleep; an engine that may go a lease without calling kvd calls
 * this. Returns 0, -EINVAL for NULL, -ECONNRESET when kvd has ended the
 * client (its lease expired, kvctl disconnect) or gone away.
 */
int kv_heartbeat(struct kv_client *c);

/* kv_pool_info - fill @info (struct kv_pool_info). 0 or -EINVAL. */
int kv_pool_info(const struct kv_client *c, struct kv_pool_info *info);

/*
 * kv_boot_id - which run of kvd @c is connected to: a random 64-bit
 * number kvd draws at start-up, the same for every client of that run
 * and another after a restart (never 0; 0 for NULL or a kvd older than
 * ABI 3.2). Block ids are only meaningful within one run: a process
 * that hands ids to another (a scheduler to its workers) sends the boot
 * id with them, and the receiver uses them only while its own client
 * says the same. Thread-safe: a read of what WELCOME said.
 */
uint64_t kv_boot_id(const struct kv_client *c);

/*
 * kv_block_ptr - address of block @id's block_bytes bytes in this
 * process's pool mapping: a host pointer on the host backend, a device
 * pointer (CUdeviceptr, usable by kernels and cudaMemcpy) on cuda. NULL
 * when id >= max_blocks, when the block's extent is not mapped here, or
 * once kvd has gone (a mapping of an old kvd is never handed out). It
 * does not check that @c holds the block.
 */
void *kv_block_ptr(const struct kv_client *c, kv_block_t id);

/* kv_set_stream: no fence at all (the caller orders its device work). */
#define KV_STREAM_NONE	((void *)~0UL)

/*
 * kv_set_stream - the CUDA stream (a cudaStream_t or CUstream) whose
 * queued work may still write @c's blocks. On the cuda backend, before
 * COMMIT, RELEASE or COW requests leave this process (kv_submit, the
 * synchronous calls, kv_seq_*) and in kv_disconnect, the library records
 * an event on it and waits until that work is done. NULL (the default)
 * is the legacy default stream, which follows the work of every blocking
 * stream; KV_STREAM_NONE turns the fence off. Returns 0, -EINVAL for a
 * NULL client, -EOPNOTSUPP for a stream on the host backend.
 */
int kv_set_stream(struct kv_client *c, void *stream);

/*
 * kv_data_ptr - address of [@off, @off + @len) in the data area, where
 * asynchronous requests keep their id arrays (4-byte aligned offsets);
 * NULL when the range does not fit. kv_data_bytes - its size in bytes.
 */
void *kv_data_ptr(const struct kv_client *c, uint32_t off, uint32_t len);
uint32_t kv_data_bytes(const struct kv_client *c);

/*
 * kv_syscalls - how many system calls libkvclient has made for @c since
 * kv_connect (doorbell writes, polls, eventfd reads, yields while
 * spinning, reads of extent messages), for measuring the per-request
 * cost; 0 for NULL. Not counted: the connection's set-up.
 */
uint64_t kv_syscalls(const struct kv_client *c);

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
void kv_prep_alloc(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_release(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_ref(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_prep_stats(struct kv_sqe *sqe, uint32_t stats_off);
/*
 * COW: @nr held ids at ids_off; each one the client may not write in
 * place (other holders, or committed) is replaced there by a new block
 * with a copy of its bytes (copied by kvd, on the device for cuda, done
 * before the CQE), the old ref dropped. res = number copied (0..nr).
 */
void kv_prep_cow(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr);
void kv_sqe_set_data64(struct kv_sqe *sqe, uint64_t data);
/*
 * kv_sqe_set_wait - let a prepared ALLOC, ALLOC_PREFIX or COW wait up to
 * @timeout_ms (1..3600000) for blocks when the pool (or the quota) is
 * short, instead of failing with -ENOSPC (-EDQUOT) at once; it then
 * completes with -ETIMEDOUT. Later SQEs of this ring do not wait behind
 * it: they are served meanwhile, so CQEs may come out of SQE order (match
 * them by user_data). Returns 0, or -EINVAL for another opcode or a
 * timeout out of range.
 */
int kv_sqe_set_wait(struct kv_sqe *sqe, uint32_t timeout_ms);
/*
 * kv_sqe_set_link - the next SQE of this ring starts only once @sqe has
 * completed with res >= 0 (KV_SQE_LINK); if it fails, the rest of the
 * chain completes -ECANCELED without being run. The order, where needed,
 * for SQEs behind a waiting one.
 */
void kv_sqe_set_link(struct kv_sqe *sqe);

/*
 * Synchronous wrappers: one round trip each, using the start of the data
 * area, so -EBUSY while asynchronous requests are queued or in flight.
 * kv_alloc returns @nr with @nr ids in @ids (-ENOSPC pool exhausted, all
 * or nothing; -E2BIG more ids than the data area or the pool can hold);
 * kv_release / kv_ref return @nr (-EPERM an id not held, -EINVAL an id
 * outside the namespace; nothing changes on error); kv_stats and kv_nop
 * return 0. All return -ECONNRESET once kvd is gone, and -ETIMEDOUT when
 * the client has a call_timeout_ms and no answer came within it (the
 * request stays in flight: its late completion is dropped by the next
 * synchronous call, which returns -EBUSY until it came).
 */
int kv_nop(struct kv_client *c);
int kv_alloc(struct kv_client *c, unsigned nr, kv_block_t *ids);
/*
 * kv_alloc_wait - kv_alloc that waits up to @timeout_ms (1..3600000) for
 * blocks to be freed when the pool is short; -ETIMEDOUT when none came
 * in time (kvd checks deadlines every 250 ms). Errors as kv_alloc.
 */
int kv_alloc_wait(struct kv_client *c, unsigned nr, kv_block_t *ids,
		  uint32_t timeout_ms);
int kv_release(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_ref(struct kv_client *c, const kv_block_t *ids, unsigned nr);
int kv_stats(struct kv_client *c, struct kv_stats *st);
/*
 * kv_cow - copy on write before writing into held blocks @ids (e.g. the
 * shared partial last block after a fork): returns how many were copied,
 * their new ids written back into @ids. -EPERM an id not held, -EINVAL
 * outside the namespace or listed twice, -ENOSPC no room for the copies,
 * -EIO the copy failed; nothing changes on error.
 */
int kv_cow(struct kv_client *c, kv_block_t *ids, unsigned nr);

/*
 * Block hashing (libkvclient/hash.c). The hash of a full block is
 *   H(parent hash, the block's token ids, extra keys)
 * over the exact byte layout documented in kv_hash_blocks(3), so other
 * implementations (other hosts, remote tiers) can reproduce it.
 */
enum kv_hash_algo {
	KV_HASH_XXH3_128	= 0,	/* libxxhash XXH3_128bits, seed 0 (default) */
	KV_HASH_SHA256		= 1,	/* first 16 bytes of SHA-256 */
};

/* A multimodal input: tokens [offset, offset + length) come from content
 * whose own hash (e.g. SHA-256 of the image bytes) is hash. */
struct kv_mm_item {
	uint32_t	offset;		/* token position in the sequence */
	uint32_t	length;		/* tokens, >= 1 */
	uint8_t		hash[32];
};

/* Extra keys: anything besides token ids that changes a block's KV. */
struct kv_extra_keys {
	const char	*lora_id;	/* adapter name, NULL or "" for none */
	const struct kv_mm_item *mm;	/* sorted by offset, may overlap blocks */
	size_t		nr_mm;
	const void	*cache_salt;	/* per-request salt, NULL for none */
	size_t		cache_salt_len;
};

/*
 * kv_hash_blocks - hash every full block of @tokens[0..@n_tokens), which
 * start at token position @start of their sequence (a multiple of
 * @block_tokens). @parent is the hash of the block before @start (NULL or
 * all-zero at the start of a sequence). Writes n_tokens / block_tokens
 * hashes to @out, chained; a partial last block gets none. Returns that
 * count, or -EINVAL (bad algo, block_tokens 0, start not aligned, NULL
 * tokens or out with a full block to hash, mm item of length 0, a LoRA
 * id or salt of 4 GiB or more), -EOVERFLOW (more than INT_MAX blocks) or
 * -EIO (libcrypto failed). Thread-safe; never touches errno.
 */
int kv_hash_blocks(int algo, const struct kv_hash *parent, size_t start,
		   const uint32_t *tokens, size_t n_tokens,
		   unsigned block_tokens, const struct kv_extra_keys *extra,
		   struct kv_hash *out);

/*
 * Prefix-cache requests. Hash arrays in the data area are 16 bytes per
 * hash at 8-byte aligned offsets; id arrays 4 bytes per id.
 * LOOKUP: the longest committed prefix of the @nr hashes, refs taken;
 * res = hits h, ids at ids_off[0..h). ALLOC_PREFIX: the same for
 * @n_hashes hashes, then new blocks up to @nr_blocks in all (all or
 * nothing); res = h. COMMIT: @nr struct kv_commit entries, updated in
 * place (see struct kv_commit); res = nr.
 */
void kv_prep_lookup(struct kv_sqe *sqe, uint32_t hashes_off, unsigned nr,
		    uint32_t ids_off);
void kv_prep_alloc_prefix(struct kv_sqe *sqe, uint32_t hashes_off,
			  unsigned n_hashes, unsigned nr_blocks,
			  uint32_t ids_off);
void kv_prep_commit(struct kv_sqe *sqe, uint32_t entries_off, unsigned nr);
/*
 * kv_prep_commit_release - COMMIT, then drop the caller's ref on each
 * entry's block (KV_COMMIT_AND_RELEASE, ABI 3.2): the blocks stay cached
 * at ref 0, as after kv_commit + kv_release of the ids it returns, in
 * one request whose completion nothing needs (no wait). Errors as
 * COMMIT's; nothing changes on error (the refs stay held).
 */
void kv_prep_commit_release(struct kv_sqe *sqe, uint32_t entries_off,
			    unsigned nr);

/*
 * Synchronous prefix-cache calls (same data-area rules as kv_alloc).
 * kv_lookup returns the hit count h (ids[0..h) held, refs taken);
 * kv_alloc_prefix returns h with all @nr_blocks ids in @ids (-ENOSPC:
 * nothing taken); kv_commit returns @nr, each entry's id possibly
 * replaced by the cached block it deduplicated to (-EPERM a block not
 * held, -EEXIST a block already committed; nothing changes on error).
 */
int kv_lookup(struct kv_client *c, const struct kv_hash *hashes, unsigned nr,
	      kv_block_t *ids);
int kv_alloc_prefix(struct kv_client *c, const struct kv_hash *hashes,
		    unsigned n_hashes, unsigned nr_blocks, kv_block_t *ids);
int kv_commit(struct kv_client *c, struct kv_commit *entries, unsigned nr);

/*
 * Retention (ABI 3.4; kv_retain(3)): of @nr ids at @ids_off (prep) or in
 * @ids, which the caller holds, committed: set the priority that orders
 * their eviction once nobody holds them (@priority KV_PRIO_MIN..
 * KV_PRIO_MAX, lowest evicted first; KV_PRIO_DEFAULT until set; 0
 * leaves it), and pin them in the pool for @pin_ms milliseconds from now
 * (0: no pin; at most KV_PIN_MAX_MS), kept even at ref 0 and charged to
 * the namespace's quota. @flags: KV_RETAIN_UNPIN drops their pins
 * (@pin_ms 0). res and return: @nr; -EINVAL (an id not held or not
 * committed, a value out of range), -EDQUOT (the namespace's pins would
 * keep slabs past half the pages its quota allows, or the pool's pinned
 * slabs past half the pool), -ENOMEM, -EOVERFLOW,
 * -EOPNOTSUPP (a kvd before ABI 3.4); nothing changes on error.
 */
void kv_prep_retain(struct kv_sqe *sqe, uint32_t ids_off, unsigned nr,
		    unsigned priority, uint64_t pin_ms, unsigned flags);
int kv_retain(struct kv_client *c, const kv_block_t *ids, unsigned nr,
	      unsigned priority, uint64_t pin_ms, unsigned flags);

/*
 * kv_seq: one request's sequence (libkvclient/seq.c), what an engine
 * holds per request. Not thread-safe; a seq belongs to one client.
 *
 * kv_seq_open: prompt lookup and allocation in one round trip. The first
 * kv_seq_hit_tokens() tokens' KV is already in the pool (prefix hit); the
 * engine computes and writes the rest, into blocks of the block table.
 * kv_seq_open_hashes: the same from precomputed full-block hashes plus
 * the tokens of the partial last block (trace replay, remote hashing).
 * kv_seq_append: n more tokens; blocks are allocated when one fills, and
 * every block whose tokens were all appended before this call (their KV
 * written by now) is committed. kv_seq_commit(s): commit every full block
 * now (after prefill). kv_seq_fork: a child sharing all blocks (refs),
 * its partial last block copied. kv_seq_close: release everything;
 * committed blocks stay cached. Errors are -errno as for kv_alloc; the
 * reason, where kvd knows it (which quota, at what limit), is then in
 * kv_last_error(c).
 */
struct kv_seq;

int kv_seq_open(struct kv_client *c, const uint32_t *tokens, size_t n_tokens,
		const struct kv_extra_keys *extra, struct kv_seq **out);
int kv_seq_open_hashes(struct kv_client *c, const struct kv_hash *hashes,
		       size_t n_hashes, const uint32_t *tail,
		       size_t n_tail, struct kv_seq **out);
/* Returns 0 when all n tokens were appended; under truncate (stop) at
 * max_context, the count it took when fewer (-E2BIG when none). */
int kv_seq_append(struct kv_seq *s, const uint32_t *tokens, size_t n);
int kv_seq_commit(struct kv_seq *s);
int kv_seq_fork(struct kv_seq *s, struct kv_seq **out);
int kv_seq_close(struct kv_seq *s);
const kv_block_t *kv_seq_block_table(const struct kv_seq *s, uint32_t *nr);
size_t kv_seq_len(const struct kv_seq *s);
size_t kv_seq_hit_tokens(const struct kv_seq *s);

/* Where a kv_seq's prefix hits at open came from, in blocks. */
struct kv_seq_hits {
	uint32_t	pool;		/* already in the pool */
	uint32_t	host;		/* brought back from the host tier */
	uint32_t	disk;		/* brought back from the disk tier */
	uint32_t	resv;
};

/*
 * kv_seq_hits - *@h for @s: its kv_seq_hit_tokens() / block_tokens hit
 * blocks split by where they were found (kvd's tiers, kvd.conf(5)
 * host_tier_size; the CQE flags of its ALLOC_PREFIX). 0, or -EINVAL for
 * NULL. A fork inherits its parent's.
 */
int kv_seq_hits(const struct kv_seq *s, struct kv_seq_hits *h);

/* How a kv_seq's blocks stay in the pool after it (kv_seq_retain(3)). */
struct kv_retention {
	uint32_t	priority;	/* KV_PRIO_MIN..KV_PRIO_MAX; 0: as is */
	uint32_t	flags;		/* zero */
	uint64_t	pin_ms;		/* 0: no pin; at most KV_PIN_MAX_MS */
	uint64_t	end;		/* tokens: blocks wholly inside
					 * [0, end) get it; 0: every block */
};

/*
 * kv_seq_retain - the retention of @s's committed blocks (kv_retain(3)):
 * @r is copied, NULL clears it. It is applied by kv_seq_close(), before
 * the release, to the blocks of the block table that are committed and
 * lie wholly below @r->end tokens (a system prompt: its length). 0, or
 * -EINVAL (NULL @s, a value out of range, flags set); kvd is not asked
 * until the close, whose return value then says how it went.
 */
int kv_seq_retain(struct kv_seq *s, const struct kv_retention *r);

/*
 * Context overflow policies (struct kv_ctx_policy, enum kv_ctx_kind in
 * kv/abi.h; kv_seq_open_policy(3)). A kv_seq's tokens are those it was
 * given, at original positions 0..len-1; its policy decides which it
 * keeps:
 *   none          all; an append past max_context fails with -E2BIG
 *   truncate      all up to max_context, then the append is cut short
 *                 (it returns how many tokens it took); with
 *                 KV_CTX_DROP_OLDEST the last max_context tokens
 *   window W      the last W tokens (the newest token included: a query
 *                 attends to itself and the W - 1 before it)
 *   sinks S W     tokens 0..S-1 and the last W
 * Blocks that hold no kept token are released as they fall out; a block
 * partly kept stays, its dropped slots masked. The block table lists the
 * kept blocks in order (sink blocks first, then the window's), with no
 * hole: the kernels' "table space" is t = table index * block_tokens +
 * slot, and a decode attends to table-space tokens t < context_len with
 * t < sink_len or t >= window_start (struct kv_decode_args).
 */

/*
 * kv_ctx_policy_parse - @s as kvd.conf and kvbench write a policy:
 * "none", "truncate" (= "truncate stop"), "truncate drop", "window W",
 * "sinks S W", the last two optionally followed by "bos" (KV_CTX_BOS) or
 * "bos-extra" (KV_CTX_BOS_EXTRA); words separated by spaces, numbers in
 * decimal tokens. Fills *@p and returns 0, or -EINVAL (not that
 * grammar, a number past 2^32 - 1), leaving *@p as it was. Checks the
 * grammar only; kv_ctx_policy_check the values. Thread-safe.
 */
int kv_ctx_policy_parse(const char *s, struct kv_ctx_policy *p);

/*
 * kv_ctx_policy_check - is *@p valid for a namespace whose sequences may
 * hold @max_context tokens (0: no limit)? 0, or -EINVAL: an unknown kind
 * or flag, a flag the kind does not take, window 0 for window or sinks, a
 * window or sinks value given to a kind without one, truncate without a
 * max_context, sinks + window (+ 1 with KV_CTX_BOS_EXTRA) above
 * max_context, KV_CTX_BOS with sinks 0, both BOS flags. When @why is not
 * NULL, *@why gets a static string that says which. Thread-safe.
 */
int kv_ctx_policy_check(const struct kv_ctx_policy *p, uint32_t max_context,
			const char **why);

/*
 * kv_ctx_policy_format - *@p as kv_ctx_policy_parse reads it, into @buf
 * of @len bytes (NUL-terminated, truncated to fit). Returns the length
 * it needed without the NUL, as snprintf(3), or -EINVAL for NULL
 * pointers or an unknown kind. Thread-safe.
 */
int kv_ctx_policy_format(const struct kv_ctx_policy *p, char *buf,
			 size_t len);

/*
 * kv_ctx_info - the context settings of @c's namespace: its max_context
 * (the lower non-zero of kv_connect_params.max_context and kvd.conf's;
 * 0: no limit), the policies its model does not support (1 << kind) and
 * the policy kv_seq_open applies (kvd.conf's context_policy, or none).
 * Any pointer may be NULL. 0, or -EINVAL for a NULL @c.
 */
int kv_ctx_info(const struct kv_client *c, uint32_t *max_context,
		uint32_t *refused, struct kv_ctx_policy *def);

/*
 * kv_seq_open_policy - kv_seq_open with policy *@policy (NULL: the
 * namespace's default, as kv_seq_open). -EINVAL, and nothing taken, when
 * kv_ctx_policy_check refuses it, when the namespace refuses its kind, or
 * for window and sinks on a KV_DTYPE_OPAQUE namespace (kvd cannot mask a
 * foreign layout); -E2BIG for a prompt longer than max_context under
 * none or truncate (stop). A prompt longer than the policy keeps gets
 * blocks only for the tokens it keeps, and a prefix lookup only for the
 * blocks before its first dropped token. kv_last_error says why.
 */
int kv_seq_open_policy(struct kv_client *c, const uint32_t *tokens,
		       size_t n_tokens, const struct kv_extra_keys *extra,
		       const struct kv_ctx_policy *policy,
		       struct kv_seq **out);

/*
 * What a decode over a kv_seq needs (kv_seq_range(3)); tokens.
 * context_len, sink_len and window_start are in table space, and are
 * what kv_decode_args' context_lens, sink_lens and window_starts take.
 * Nothing dropped yet: sink_len = window_start = 0.
 */
struct kv_seq_range {
	struct kv_ctx_policy policy;	/* the sequence's own */
	uint32_t	nr_blocks;	/* kept blocks = the block table */
	uint32_t	context_len;	/* table-space end */
	uint32_t	sink_len;	/* table-space tokens [0, sink_len) */
	uint32_t	window_start;	/* ... and [window_start, context_len) */
	uint64_t	len;		/* tokens appended in all (kv_seq_len) */
	uint64_t	kept;		/* of them attended: the query's cache
					 * position is kept - 1, its original
					 * position len - 1 */
	uint64_t	dropped;	/* len - kept */
	uint64_t	commit_end;	/* tokens [0, commit_end) may be
					 * committed: at most the sinks +
					 * window a policy keeps (their KV was
					 * computed before anything was
					 * dropped), and never past a token
					 * that was dropped in the call that
					 * brought it (it had no slot); the
					 * blocks past it never are */
};

/* kv_seq_range - fill *@r for @s. 0, or -EINVAL for NULL. */
int kv_seq_range(const struct kv_seq *s, struct kv_seq_range *r);

/* Position conventions of kv_seq_positions. */
enum kv_pos_conv {
	KV_POS_ORIGINAL	= 0,	/* a token's index in the whole sequence,
				 * dropped tokens counted (Mistral's sliding
				 * window; vLLM's positions) */
	KV_POS_CACHE	= 1,	/* its index among the kept tokens, sinks
				 * first (StreamingLLM's positions "within
				 * the cache") */
};

/*
 * kv_seq_positions - the position, in convention @conv, of the token in
 * each slot of the block table: pos[i] for table-space slot i (table
 * entry i / block_tokens, slot i % block_tokens), -1 for a slot that
 * holds no kept token (dropped, or past the end). Writes min(@n,
 * nr_blocks * block_tokens) entries; returns nr_blocks * block_tokens
 * (so a first call with @n 0 sizes the array), or -EINVAL for NULL, a
 * NULL @pos with @n > 0, an unknown @conv, or more than INT_MAX slots.
 */
int kv_seq_positions(const struct kv_seq *s, int conv, int64_t *pos,
		     size_t n);

/*
 * kv_last_error - why the last kv_seq_* call or synchronous request
 * (kv_alloc, kv_alloc_wait, kv_release, kv_ref, kv_cow, kv_lookup,
 * kv_alloc_prefix, kv_commit) on @c that failed did: a line of text such
 * as "kv_seq_append: namespace quota: model m at its max_pages (2
 * pages)". "" when none failed yet; valid until the next such call that
 * fails on @c.
 */
const char *kv_last_error(const struct kv_client *c);

#ifdef __cplusplus
}
#endif

#endif /* KV_KV_H */
