/* SPDX-License-Identifier: MIT */
/*
 * kvd wire and ring ABI, shared by the daemon (kvd) and libkvclient.
 *
 * Everything here crosses a process boundary: fixed-width types only,
 * explicit reserved fields that must be zero, sizes proved at compile
 * time. A change that moves a field bumps KV_ABI_MAJOR; a change that only
 * adds an opcode or a feature bit bumps KV_ABI_MINOR.
 *
 * Shapes follow io_uring's uapi header: a client learns every ring
 * location from struct kv_ring_offsets in WELCOME, so the layout can grow.
 */
#ifndef KV_ABI_H
#define KV_ABI_H

#include <linux/types.h>
#include <stddef.h>

#define KV_ABI_MAJOR		3	/* 3: device pools (exports, COW) */
#define KV_ABI_MINOR		4	/* 1: client leases, admin disconnect;
					 * 2: opaque namespaces, boot_id;
					 * 3: context policies in WELCOME,
					 * the host tier (KV_SQE_POOL_ONLY,
					 * tier hits in CQE flags);
					 * 4: RETAIN (priority, pins),
					 * admin PIN, UNPIN and OPS */

#define KV_MAGIC		0x3144564bU	/* "KVD1" little endian */

/* Fixed sizes of the pool's memory-moving unit (DESIGN.md "page"). */
#define KV_PAGE_SHIFT		21
#define KV_PAGE_BYTES		(1UL << KV_PAGE_SHIFT)	/* 2 MiB, CUDA VMM granularity */

#define KV_MODEL_ID_MAX		64	/* bytes, NUL included */
#define KV_ERRMSG_MAX		128	/* bytes, NUL included */
#define KV_MODEL_REV_MAX	32	/* bytes, NUL included */

/* Control message types (SOCK_SEQPACKET, one struct per datagram). */
enum {
	KV_MSG_HELLO		= 1,	/* client -> kvd: struct kv_hello */
	KV_MSG_WELCOME		= 2,	/* kvd -> client: struct kv_welcome + fds */
	KV_MSG_EXTENT		= 3,	/* kvd -> client: struct kv_extent_msg + fd */
	KV_MSG_ADMIN		= 16,	/* kvctl -> kvd admin socket: struct kv_admin_req */
	KV_MSG_ADMIN_REPLY	= 17,	/* kvd -> kvctl */
};

/* KV dtypes: the element type of K and V inside a block. */
enum kv_dtype {
	KV_DTYPE_FP16		= 0,
	KV_DTYPE_BF16		= 1,
	KV_DTYPE_FP32		= 2,
	KV_DTYPE_FP8_E4M3	= 3,
	KV_DTYPE_INT8		= 4,
	/*
	 * Bytes kvd does not interpret, in another engine's own layout (a
	 * vLLM offloading tier): a block is `layers` runs of `run_bytes`
	 * (kv_geometry.head_dim) bytes each, kv_heads is 1, quant 0, and
	 * block_tokens says how many tokens one block covers. kvd's
	 * kernels refuse such a layout (kv_layout_init: -EINVAL).
	 */
	KV_DTYPE_OPAQUE		= 5,
	KV_DTYPE__MAX,
};

/* Limit of an opaque namespace's run_bytes (its blocks' limit: 1 GiB). */
#define KV_OPAQUE_RUN_MAX	(1U << 30)

/*
 * KV quantization (kv_geometry.quant), for the fp8 and int8 dtypes: the
 * values are stored as v / scale, with fp32 scales after the values of
 * each layer (see kv_geometry_layer_bytes and include/kv/kernels.h).
 */
enum kv_quant {
	KV_QUANT_NONE		= 0,	/* no scales (the engine's own scheme) */
	KV_QUANT_TOKEN		= 1,	/* a scale per (K|V, kv_head, slot),
					 * computed on write: amax / qmax */
	KV_QUANT_CHANNEL	= 2,	/* a scale per (K|V, kv_head, channel),
					 * static, from a calibration file */
	KV_QUANT__MAX,
};

/*
 * Model geometry: what decides a block's size and layout. Inside a block
 * bytes are laid out [layer][K|V][kv_head][slot][head_dim] (DESIGN.md), so
 *   block_bytes = layers * 2 * kv_heads * block_tokens * head_dim * dtype size.
 * Everything here is part of the namespace key, tensor-parallel rank and
 * world size included: two shards with equal shapes never share blocks.
 * Limits (kvd answers -EINVAL beyond them): every count >= 1, layers,
 * kv_heads <= 1024, head_dim <= 1024, block_tokens <= 1024, block_bytes a
 * multiple of 256 (aligned vector loads) and at most 1 GiB.
 * KV_DTYPE_OPAQUE reads head_dim as run_bytes (up to KV_OPAQUE_RUN_MAX):
 *   block_bytes = layers * run_bytes, kv_heads 1, quant KV_QUANT_NONE.
 */
struct kv_geometry {
	__u32	layers;		/* opaque: runs per block */
	__u32	kv_heads;	/* opaque: 1 */
	union {
		__u32	head_dim;
		__u32	run_bytes;	/* KV_DTYPE_OPAQUE: bytes of one run */
	};
	__u32	block_tokens;
	__u32	dtype;		/* enum kv_dtype */
	__u32	quant;		/* enum kv_quant; fp8 and int8 only */
	__u32	tp_rank;	/* tensor-parallel shard: 0..tp_size-1 */
	__u32	tp_size;	/* 0 or 1: not sharded */
};

/*
 * HELLO: first and only datagram a client sends on its control socket.
 * Ring sizes are requests; kvd answers with what it set up.
 */
struct kv_hello {
	__u32	magic;		/* KV_MAGIC */
	__u16	abi_major;	/* KV_ABI_MAJOR of the client */
	__u16	abi_minor;
	__u32	type;		/* KV_MSG_HELLO */
	__u32	size;		/* sizeof(struct kv_hello) */
	__u32	sq_entries;	/* power of two, 1..KV_MAX_SQ_ENTRIES */
	__u32	data_bytes;	/* data area bytes, multiple of 4096 */
	__u32	flags;		/* none defined yet; must be zero */
	__u32	lease_ms;	/* 0: none; else the client makes a call at
				 * least this often (KV_LEASE_MIN_MS..
				 * KV_LEASE_MAX_MS) or kvd ends it; kvd
				 * before ABI 3.1 refuses anything but 0 */
	char	model_id[KV_MODEL_ID_MAX];	/* NUL-terminated, non-empty */
	struct kv_geometry geom;
	char	model_rev[KV_MODEL_REV_MAX];	/* revision, "" for none */
};

#define KV_MAX_SQ_ENTRIES	4096
#define KV_LEASE_MIN_MS		1000	/* kvd checks leases every 250 ms */
#define KV_LEASE_MAX_MS		86400000	/* a day */
#define KV_MAX_IDS		65536	/* ids in one SQE; beyond: -E2BIG */
#define KV_MIN_DATA_BYTES	4096
#define KV_MAX_DATA_BYTES	(16U << 20)

/* Byte offsets of each ring field inside the ring memfd. */
struct kv_ring_offsets {
	__u32	sq_head;	/* __u32, written by kvd */
	__u32	sq_tail;	/* __u32, written by the client */
	__u32	sq_flags;	/* __u32, KV_SQ_* written by kvd */
	__u32	sq_entries;
	__u32	sqes;		/* struct kv_sqe[sq_entries] */
	__u32	cq_head;	/* __u32, written by the client */
	__u32	cq_tail;	/* __u32, written by kvd */
	__u32	cq_flags;	/* __u32, KV_CQ_* written by the client */
	__u32	cq_entries;
	__u32	cqes;		/* struct kv_cqe[cq_entries] */
	__u32	data;		/* data area */
	__u32	data_bytes;
	__u32	ring_bytes;	/* size of the whole memfd */
	__u32	resv[3];
};

/* Pool backends and exports. */
enum {
	KV_BACKEND_HOST		= 1,	/* memfd in host RAM */
	KV_BACKEND_CUDA		= 2,	/* device memory of one GPU */
};

/* How the pool's memory reaches a client (struct kv_welcome export). */
enum {
	KV_EXPORT_MEMFD		= 1,	/* host: a sealed memfd per extent */
	KV_EXPORT_VMM		= 2,	/* cuda: a cuMemCreate POSIX fd per extent */
	KV_EXPORT_LEGACY	= 3,	/* cuda: one cudaMalloc'd range, its
					 * cudaIpcMemHandle_t in ipc_handle */
};

#define KV_IPC_HANDLE_BYTES	64	/* sizeof(cudaIpcMemHandle_t) */

/*
 * Context overflow policies of a kv_seq (kv_seq_open_policy(3)): what a
 * sequence keeps when it outgrows its namespace's max_context, or when
 * an operator bounds its memory. kv_seq applies them (libkvclient); the
 * kernels mask what they leave out (struct kv_decode_args).
 */
enum kv_ctx_kind {
	KV_CTX_NONE	= 0,	/* grow up to max_context (if any); an
				 * append past it: -E2BIG, nothing changed */
	KV_CTX_TRUNCATE	= 1,	/* at max_context: stop there (short
				 * append), or with KV_CTX_DROP_OLDEST keep
				 * the last max_context tokens */
	KV_CTX_WINDOW	= 2,	/* keep the last window tokens (Mistral's
				 * sliding window) */
	KV_CTX_SINKS	= 3,	/* keep the first sinks tokens and the
				 * last window (StreamingLLM's attention
				 * sinks) */
	KV_CTX__MAX,
};

#define KV_CTX_DROP_OLDEST	(1U << 0)	/* truncate: drop, not stop */
#define KV_CTX_BOS		(1U << 1)	/* sinks: token 0 is a BOS
						 * token, one of the sinks
						 * (sinks >= 1) */
#define KV_CTX_BOS_EXTRA	(1U << 2)	/* window, sinks: token 0 is a
						 * BOS token kept beyond the
						 * sinks (sinks + 1 kept) */
#define KV_CTX_FLAGS		(KV_CTX_DROP_OLDEST | KV_CTX_BOS | \
				 KV_CTX_BOS_EXTRA)

/* A policy: struct kv_ctx_policy, in tokens. Zeroed: KV_CTX_NONE. */
struct kv_ctx_policy {
	__u32	kind;		/* enum kv_ctx_kind */
	__u32	flags;		/* KV_CTX_* */
	__u32	sinks;		/* KV_CTX_SINKS: tokens kept at the start */
	__u32	window;		/* KV_CTX_WINDOW, _SINKS: tokens kept at the
				 * end (>= 1); else 0 */
};

/*
 * WELCOME: kvd's answer. On success (status == 0) the ancillary data holds,
 * in this order, the ring memfd, the submit doorbell eventfd (client ->
 * kvd) and the completion eventfd (kvd -> client); the pool's extents of
 * the client's tenant follow as EXTENT messages (isolation by extents).
 * On failure status is a negative errno, errmsg says why, no fd is passed
 * and kvd closes the socket.
 */
struct kv_welcome {
	__u32	magic;
	__u16	abi_major;	/* KV_ABI_MAJOR of kvd */
	__u16	abi_minor;
	__u32	type;		/* KV_MSG_WELCOME */
	__u32	size;
	__s32	status;		/* 0 or -errno */
	__u32	client_id;	/* unique for the daemon's lifetime */
	__u32	ns_id;		/* namespace the client's blocks come from */
	__u32	backend;	/* KV_BACKEND_* */
	__u64	pool_bytes;	/* bytes of the pool mapping */
	__u64	page_bytes;	/* KV_PAGE_BYTES */
	__u64	block_bytes;	/* bytes of one block of this geometry */
	__u64	slab_bytes;	/* bytes of one slab of this namespace */
	__u32	max_blocks;	/* ids are < max_blocks (pool_bytes / block_bytes) */
	__u32	features;	/* KV_FEAT_* */
	struct kv_ring_offsets ring;
	char	errmsg[KV_ERRMSG_MAX];
	__u64	extent_bytes;	/* the pool in extents of this size (last shorter) */
	__u32	nr_extents;
	__u32	export_kind;	/* KV_EXPORT_* */
	__s32	device;		/* cuda: kvd's ordinal of the device; -1 host */
	__u32	resv0;
	__u8	device_uuid[16];	/* cuda: the device (CUuuid), for the
					 * client to find it in its own ordinals */
	__u8	ipc_handle[KV_IPC_HANDLE_BYTES];	/* KV_EXPORT_LEGACY */
	__u64	boot_id;	/* drawn at random when kvd starts, the same
				 * for all its clients: another kvd (a
				 * restart) has another (ABI 3.2; 0 before) */
	/* ABI 3.3: the namespace's context, from kvd.conf (0s before). */
	__u32	max_context;	/* tokens a sequence may hold; 0: no limit */
	__u32	ctx_refused;	/* 1 << kind of each policy the namespace's
				 * model does not support */
	struct kv_ctx_policy ctx_default;	/* for kv_seq_open */
};

/* The WELCOME kvd sends a client of ABI 3.0 to 3.2: the fields above
 * ctx_default (its max_context and ctx_refused were 0 then). */
#define KV_WELCOME_SIZE_3_2	offsetof(struct kv_welcome, ctx_default)

/*
 * EXTENT: one extent of the pool for this client's tenant, its fd by
 * SCM_RIGHTS (a memfd, or a cuMemCreate POSIX fd), to be mapped at pool
 * offset @offset. kvd sends it before any completion names a block
 * inside it; a later one for the same index (a higher gen) replaces the
 * mapping. With KV_EXTENT_DROP and no fd: the extent is gone (kvd gave
 * its memory back or another tenant has it now): unmap it.
 */
struct kv_extent_msg {
	__u32	magic;
	__u32	type;		/* KV_MSG_EXTENT */
	__u32	size;
	__u32	index;
	__u64	offset;
	__u64	bytes;
	__u32	gen;
	__u32	flags;		/* KV_EXTENT_* */
};

#define KV_EXTENT_DROP		(1U << 0)

#define KV_FEAT_NEED_WAKEUP	(1U << 0)	/* NEED_WAKEUP flags honoured */
#define KV_FEAT_EXTENTS		(1U << 1)	/* pool sent as EXTENT messages */
#define KV_FEAT_LEASE		(1U << 2)	/* HELLO lease_ms honoured */

/* SQ flags, written by kvd. */
#define KV_SQ_NEED_WAKEUP	(1U << 0)	/* kvd sleeps or stopped polling this
						 * idle ring: ring the doorbell */
#define KV_SQ_CQ_FULL		(1U << 1)	/* kvd waits for CQ room: ring after reaping */
#define KV_SQ_EXTENTS		(1U << 2)	/* EXTENT messages queued: read them */

/* CQ flags, written by the client. */
#define KV_CQ_NEED_WAKEUP	(1U << 0)	/* client sleeps: write the cq eventfd */

/* Opcodes. The numbering is ABI. */
enum kv_op {
	KV_OP_NOP		= 0,
	KV_OP_ALLOC		= 1,	/* nr ids written at data[off] */
	KV_OP_RELEASE		= 2,	/* nr ids read from data[off] */
	KV_OP_REF		= 3,	/* nr ids read from data[off] */
	KV_OP_STATS		= 4,	/* struct kv_stats written at data[off], nr = bytes */
	KV_OP_LOOKUP		= 5,	/* nr hashes at data[off] -> hit ids at data[args[0]] */
	KV_OP_ALLOC_PREFIX	= 6,	/* nr ids at data[off]: hits for the args[1]
					 * hashes at data[args[0]], then new blocks */
	KV_OP_COMMIT		= 7,	/* nr struct kv_commit at data[off];
					 * args[0]: KV_COMMIT_AND_RELEASE */
	KV_OP_COW		= 8,	/* nr held ids at data[off]; shared ones
					 * replaced in place by private copies */
	KV_OP_RETAIN		= 9,	/* nr held committed ids at data[off]:
					 * args[0] priority, args[1] pin ms,
					 * args[2] KV_RETAIN_* (ABI 3.4) */
	KV_OP__MAX,
};

/*
 * A block hash: 128 bits, in the byte order kv_hash_blocks(3) documents
 * (XXH3-128 canonical form, or the first 16 bytes of SHA-256). All zero
 * is the root: the parent of a sequence's first block.
 */
struct kv_hash {
	__u8	b[16];
};

/*
 * One COMMIT entry (40 bytes). In: a block the caller holds, its hash
 * and its parent's hash. Out: id is the block that now holds this hash
 * for the caller (another id when the hash was already committed: the
 * caller's block was released and a ref on the cached one taken, as
 * vLLM does), flags has KV_COMMIT_DEDUP set in that case.
 */
struct kv_commit {
	__u32	id;
	__u32	flags;		/* in: zero; out: KV_COMMIT_* */
	struct kv_hash hash;
	struct kv_hash parent;
};

#define KV_COMMIT_DEDUP		(1U << 0)

/*
 * COMMIT's sqe->args[0] (ABI 3.2): KV_COMMIT_AND_RELEASE drops, once the
 * entries are committed, the caller's ref on each entry's block (the
 * cached one after a dedup): they stay cached at ref 0 and the caller
 * needs nothing from the completion, so it need not wait for it.
 */
#define KV_COMMIT_AND_RELEASE	(1U << 0)

/*
 * RETAIN (ABI 3.4): how long committed blocks stay in the pool once
 * nobody holds them, as TensorRT-LLM's KvCacheRetentionConfig sets it.
 *
 * args[0], the priority: 0 leaves each block's as it is; 1 to 100 sets
 * it (KV_PRIO_DEFAULT, TensorRT-LLM's default, is what a block has until
 * a RETAIN says otherwise). Eviction from the pool takes the lowest
 * priority first, the least recently used first among equals.
 *
 * args[1], a pin: 1 to KV_PIN_MAX_MS milliseconds during which the pool
 * keeps the block even at ref 0 (a pin already longer stays longer);
 * 0 pins nothing. The slabs a namespace's pins keep (one pin keeps its
 * slab from reclaim) take at most half the pages its quota (or the
 * pool) allows it, and the pinned slabs of all namespaces half the
 * pool: past that RETAIN fails -EDQUOT.
 *
 * args[2]: KV_RETAIN_UNPIN drops the blocks' pins first (args[1] must
 * then be 0).
 */
#define KV_PRIO_MIN		1
#define KV_PRIO_DEFAULT		35
#define KV_PRIO_MAX		100
#define KV_PIN_MAX_MS		(7ULL * 24 * 3600 * 1000)	/* a week */
#define KV_RETAIN_UNPIN		(1U << 0)

/*
 * Submission entry, 64 bytes. off/nr locate an array in the client's data
 * area: ids are __u32 (kv_block_t), so an id array spans nr * 4 bytes.
 */
struct kv_sqe {
	__u8	opcode;		/* enum kv_op */
	__u8	flags;		/* KV_SQE_*; others must be zero */
	__u16	resv0;
	__u32	nr;		/* number of ids (ALLOC, RELEASE, REF) or bytes (STATS) */
	__u32	off;		/* byte offset into the data area, 4-byte aligned */
	__u32	resv1;
	__u64	user_data;	/* copied to the CQE */
	__u64	args[4];	/* op-specific; zero for the ops above */
	__u64	resv2;
};

/*
 * KV_SQE_WAIT: ALLOC, ALLOC_PREFIX and COW wait, when the pool is short,
 * up to args[3] milliseconds (1..3600000) for blocks to be freed instead
 * of failing at once; then -ETIMEDOUT. Later SQEs of the ring do not
 * wait behind it: they are served meanwhile, so CQEs may come out of SQE
 * order (match them by user_data). At most sq_entries SQEs wait at once;
 * past that the ring is served again when one completes.
 *
 * KV_SQE_LINK: the next SQE of the ring starts only once this one has
 * completed with res >= 0; if it fails, the rest of the chain (up to and
 * including the first SQE without KV_SQE_LINK) completes -ECANCELED
 * without being run. SQEs after the chain are not held up by it.
 */
#define KV_SQE_WAIT		(1U << 0)
#define KV_SQE_LINK		(1U << 1)
/*
 * KV_SQE_POOL_ONLY (ABI 3.3): LOOKUP and ALLOC_PREFIX hit the pool only;
 * blocks in a tier behind it are not brought back for this request.
 */
#define KV_SQE_POOL_ONLY	(1U << 2)
#define KV_WAIT_MAX_MS		3600000

/*
 * Completion entry, 16 bytes. res: count (ids, bytes) or -errno. flags:
 * for LOOKUP and ALLOC_PREFIX, how many of the res hits came from a tier
 * behind the pool (brought back for this request): KV_CQE_HOST_HITS and
 * KV_CQE_DISK_HITS of it, 16 bits each (0xffff: that many or more); 0
 * for every other opcode (ABI 3.3; 0 before).
 */
struct kv_cqe {
	__u64	user_data;
	__s32	res;
	__u32	flags;
};

#define KV_CQE_HOST_HITS(flags)	((flags) & 0xffffU)
#define KV_CQE_DISK_HITS(flags)	((flags) >> 16)

/* Written by KV_OP_STATS: pool-wide and this client's/namespace's books. */
struct kv_stats {
	__u64	pool_bytes;
	__u32	nr_pages;
	/* the client's tenant's alone (pool-wide: the admin socket) */
	__u32	pages_used;	/* pages in slabs of its namespaces */
	__u32	pages_free;	/* more it may take: pool less its own, max_pages */
	__u32	peak_pages_used;	/* its most at once */
	__u32	nr_clients;	/* its clients */
	__u32	nr_namespaces;	/* its namespaces */
	__u64	block_bytes;	/* this client's namespace */
	__u32	ns_slabs;
	__u32	ns_blocks;	/* blocks in the namespace's slabs */
	__u32	ns_blocks_used;	/* ref > 0 */
	__u32	ns_max_blocks;
	__u32	client_blocks;	/* distinct blocks this client holds */
	__u32	client_refs;	/* references this client holds */
	__u64	ops;		/* SQEs kvd served for this client */
	/* prefix cache of the client's model (tenant, model, geometry) since
	 * it first came, kept while it was away (its namespace freed idle) */
	__u64	lookups;	/* LOOKUP and ALLOC_PREFIX requests */
	__u64	hit_blocks;	/* blocks those returned as hits */
	__u64	evictions;	/* cached blocks dropped to reuse memory */
	__u32	cached_blocks;	/* committed, ref 0, evictable */
	__u32	committed_blocks;	/* committed, any ref */
	__u64	lookup_blocks;	/* full-block hashes those looked up:
				 * hit ratio = hit_blocks / lookup_blocks
				 * (0 from an older kvd: was resv) */
	__u32	quota_why;	/* KV_QUOTA_*: the limit behind this
				 * client's last -EDQUOT (0: none yet) */
	__u32	quota_limit;	/* that limit: pages, or blocks for
				 * KV_QUOTA_CLIENT */
};

/* Which limit refused a request -EDQUOT (struct kv_stats quota_why). */
enum {
	KV_QUOTA_NONE		= 0,
	KV_QUOTA_NAMESPACE	= 1,	/* the namespace's max_pages (kvd.conf) */
	KV_QUOTA_TENANT		= 2,	/* its tenant's max_pages (kvd.conf) */
	KV_QUOTA_CLIENT		= 3,	/* max_client_blocks: refs one client holds */
	KV_QUOTA_PINS		= 4,	/* RETAIN: the slabs its pins keep at
					 * half its pages, or the pool's at half
					 * the pool (limit: pages; ABI 3.4) */
};

/* Admin socket (kvctl). */
enum {
	KV_ADMIN_STATUS		= 1,	/* reply: kv_admin_status + kv_admin_ns[nr_ns] */
	KV_ADMIN_CLIENTS	= 2,	/* reply: kv_admin_status + kv_admin_client[nr_clients] */
	KV_ADMIN_PREFIX		= 3,	/* reply: kv_admin_status + kv_admin_prefix[nr_ns] */
	KV_ADMIN_EVICT		= 4,	/* arg[0]: ns id or ~0 for all; reply as PREFIX */
	KV_ADMIN_TREE		= 5,	/* arg[0]: ns id, arg[1]: depth; reply:
					 * kv_admin_status + kv_admin_tree_node[] */
	KV_ADMIN_CHECK		= 6,	/* reply: kv_admin_status + kv_admin_check[nr_ns] */
	KV_ADMIN_RELOAD		= 7,	/* re-read kvd.conf; reply: + one kv_admin_msg */
	KV_ADMIN_TENANTS	= 8,	/* reply: kv_admin_status + kv_admin_tenant[] */
	KV_ADMIN_DISCONNECT	= 9,	/* arg[0]: client id (as CLIENTS gives
					 * it): end it, release its blocks;
					 * reply: kv_admin_status + the
					 * kv_admin_client it was; -ENOENT
					 * for no live client of that id */
	KV_ADMIN_TIERS		= 10,	/* reply: kv_admin_status + kv_admin_tier[]
					 * (ABI 3.3) */
	KV_ADMIN_PIN		= 11,	/* struct kv_admin_pin_req: pin a
					 * prefix; reply: kv_admin_status +
					 * one kv_admin_pin (ABI 3.4) */
	KV_ADMIN_UNPIN		= 12,	/* the same, dropping the pins */
	KV_ADMIN_OPS		= 13,	/* reply: kv_admin_status +
					 * kv_admin_op[KV_OP__MAX] (ABI 3.4) */
};

/*
 * The upper bounds (ns) of struct kv_admin_op's buckets, log-spaced
 * 1-2-5 so that a ~300 ns round trip and a ~100 us wake-up land apart.
 */
#define KV_ADMIN_OP_BUCKETS	16
#define KV_ADMIN_OP_LE_NS	{ 100, 200, 500, 1000, 2000, 5000, 10000, \
				  20000, 50000, 100000, 200000, 500000, \
				  1000000, 2000000, 5000000, 10000000 }

/*
 * One opcode's SQEs since kvd started (kvctl metrics). Service time is
 * SQE taken to its issue's return, sampled: 1 SQE in 2^sample_shift
 * of each opcode is timed (a parked SQE's wait is not in it).
 */
struct kv_admin_op {
	char	name[16];	/* "LOOKUP" */
	__u32	opcode;		/* KV_OP_* */
	__u32	sample_shift;
	__u64	requests;	/* SQEs taken */
	__u64	errors;		/* of them completed at once with res < 0 */
	__u64	timed;		/* sampled SQEs */
	__u64	timed_ns;	/* their service time, summed */
	__u64	bucket[KV_ADMIN_OP_BUCKETS];	/* timed ones <= LE_NS[i],
						 * not cumulative; the rest
						 * took longer */
};


/* A line of text (KV_ADMIN_RELOAD: what was applied, or why not). */
struct kv_admin_msg {
	char	text[256];
};

/* One tenant, its pages and quota (0: none). */
struct kv_admin_tenant {
	__u32	id;
	__u32	configured;	/* 1: from kvd.conf; 0: one per uid */
	__u32	in_conf;	/* 1: admits new clients */
	__u32	uid;		/* of a per-uid tenant */
	char	name[32];
	__u32	nr_clients;
	__u32	pages;
	__u32	min_pages;
	__u32	max_pages;
	__u64	resv[2];
};

/* One tier behind the pool (kvctl status, kvctl tiers). */
struct kv_admin_tier {
	char	name[16];	/* "host" */
	__u64	cap_bytes;	/* 0: off */
	__u64	used_bytes;
	__u64	blocks;		/* entries held */
	/* since kvd started */
	__u64	demotions;	/* blocks taken in from the pool */
	__u64	promotions;	/* blocks brought back into the pool */
	__u64	lookups;	/* lookups that asked it */
	__u64	drops;		/* dropped for room */
	__u64	corrupt;	/* dropped: checksum mismatch */
	__u64	replaced;	/* taken in again under the same key */
	__u64	errors;		/* I/O errors (a disk tier) */
	/* ABI 3.4: a disk tier's I/O, issue to completion, since kvd
	 * started, in microseconds (within 25%); 0: none yet (was resv) */
	__u32	read_p50_us;
	__u32	read_p99_us;
	__u32	write_p50_us;
	__u32	write_p99_us;
};

/* kv_admin_check.ns_id of the record for the tiers' own books. */
#define KV_ADMIN_CHECK_TIERS	0xffffffffU

/* The invariant check of one namespace's books (kvctl check). */
struct kv_admin_check {
	__u32	ns_id;
	__s32	status;		/* 0, or -EUCLEAN with why set */
	char	why[120];
};

struct kv_admin_req {
	__u32	magic;
	__u16	abi_major;
	__u16	abi_minor;
	__u32	type;		/* KV_MSG_ADMIN */
	__u32	cmd;		/* KV_ADMIN_* */
	__u32	arg[2];
	__u64	resv;
};

/*
 * PIN and UNPIN name a prefix by the hash of its last block, as the
 * engine computed it (kv_hash_blocks(3)); that block and its committed
 * ancestors up to the root are pinned (or unpinned) in namespace
 * req.arg[0] for req.arg[1] seconds (PIN: 1..KV_PIN_MAX_MS / 1000;
 * UNPIN: 0). UNPIN of the all-zero hash (the root: no block's) drops
 * every pin of the namespace. status -ENOENT: no such namespace;
 * -ENXIO: no committed block of that hash in its pool; -EDQUOT: past
 * its pin limit.
 */
struct kv_admin_pin_req {
	struct kv_admin_req req;
	struct kv_hash	hash;
};

struct kv_admin_pin {
	__u32	ns_id;
	__u32	blocks;		/* in the prefix: the block, its ancestors */
	__u32	changed;	/* PIN: newly pinned; UNPIN: unpinned */
	__u32	pinned;		/* the namespace's pinned blocks now */
	__u64	ttl_ms;		/* PIN: the pin's time to live */
	__u64	resv;
};

struct kv_admin_status {
	__u32	magic;
	__u16	abi_major;
	__u16	abi_minor;
	__u32	type;		/* KV_MSG_ADMIN_REPLY */
	__s32	status;		/* 0 or -errno */
	__u32	backend;
	__u32	pid;		/* kvd's pid */
	__u64	pool_bytes;
	__u64	page_bytes;
	__u32	nr_pages;
	__u32	pages_used;
	__u32	pages_free;
	__u32	peak_pages_used;
	__u32	nr_clients;
	__u32	nr_namespaces;
	__u32	nr_records;	/* entries after this header */
	__u32	resv0;
	__u64	uptime_ms;
	__u64	ops;		/* SQEs served, all clients */
	__u64	reclaims;	/* cached blocks evicted for another namespace */
	__u32	export_kind;	/* KV_EXPORT_* */
	__s32	device;		/* cuda device ordinal, -1 on host */
	__u64	backed_bytes;	/* pool bytes now backed by memory (extents) */
	__u32	version;	/* kvd's release, KV_VERSION_CODE(); 0: not said */
	__u32	resv1;
};

/* A release x.y.z as one number (struct kv_admin_status version). */
#define KV_VERSION_CODE(x, y, z)	((__u32)(x) << 16 | (__u32)(y) << 8 | (__u32)(z))

struct kv_admin_ns {
	__u32	id;
	__u32	nr_clients;
	char	model_id[KV_MODEL_ID_MAX];
	char	model_rev[KV_MODEL_REV_MAX];
	__u32	tenant;
	__u32	waste_ppm;	/* slab bytes no block uses, per million */
	struct kv_geometry geom;
	__u64	block_bytes;
	__u64	slab_bytes;
	__u32	slab_pages;
	__u32	nr_slabs;
	__u32	blocks;		/* in slabs */
	__u32	blocks_used;	/* ref > 0 */
	__u32	blocks_free;	/* in slabs, ref 0 */
	__u32	max_blocks;
	__u32	pages;		/* charged to this namespace */
	__u32	min_pages;	/* quota, 0: none */
	__u32	max_pages;	/* quota, 0: unlimited */
	__u32	cached_blocks;
	/* ABI 3.3: what a client of it connecting now gets (WELCOME) */
	__u32	max_context;	/* kvd.conf's, tokens; 0: none */
	__u32	ctx_refused;	/* 1 << kind of each policy refused */
	struct kv_ctx_policy ctx_default;
	__u32	pinned_blocks;	/* ABI 3.4: kept by pins (was resv) */
};

struct kv_admin_client {
	__u32	id;
	__u32	pid;
	__u32	uid;
	__u32	gid;
	__u32	ns_id;
	__u32	blocks;		/* distinct blocks held */
	__u32	refs;		/* references held */
	__u32	sq_entries;
	__u64	ops;
	__u64	resv[2];
};

/* Prefix cache of one namespace. */
struct kv_admin_prefix {
	__u32	ns_id;
	__u32	block_tokens;
	char	model_id[KV_MODEL_ID_MAX];
	__u64	lookups;	/* counters: since the model first came, */
	__u64	hit_blocks;	/* kept while its namespace was freed idle */
	__u64	hit_tokens;	/* hit_blocks * block_tokens */
	__u64	evictions;
	__u32	cached_blocks;
	__u32	committed_blocks;
	__u32	blocks_used;
	__u32	evicted_now;	/* KV_ADMIN_EVICT: blocks it dropped */
	__u64	lookup_blocks;	/* full-block hashes looked up (0 from an
				 * older kvd: was resv) */
	__u64	lookup_tokens;	/* lookup_blocks * block_tokens */
};

/* One committed block of a namespace's prefix tree, in depth-first order. */
struct kv_admin_tree_node {
	__u32	id;
	__u32	parent;		/* ~0: a root (first block of a prefix) */
	__u32	depth;		/* 0 for roots */
	__u32	ref;		/* 0: cached, evictable when a leaf */
	__u32	children;	/* committed children */
	__u32	subtree;	/* committed blocks below it, itself included */
	struct kv_hash hash;	/* zero: kvd shows no index key (they mix
				 * the tenant's key in) */
};

#define KV_ADMIN_MAX_RECORDS	1024	/* = the most clients or namespaces */
/* Largest admin reply datagram: the header and 1024 of the larger record. */
#define KV_ADMIN_REPLY_MAX	(sizeof(struct kv_admin_status) + \
				 KV_ADMIN_MAX_RECORDS * sizeof(struct kv_admin_ns))

/* Bytes of one element of a KV dtype; 0 for an unknown dtype. */
static inline __u32 kv_dtype_bytes(__u32 dtype)
{
	switch (dtype) {
	case KV_DTYPE_FP16:
	case KV_DTYPE_BF16:
		return 2;
	case KV_DTYPE_FP32:
		return 4;
	case KV_DTYPE_FP8_E4M3:
	case KV_DTYPE_INT8:
	case KV_DTYPE_OPAQUE:
		return 1;
	}
	return 0;
}

/*
 * Bytes of one layer of a block of geometry @g: K then V values, each
 * [kv_head][slot][head_dim]; quantized, then the K and V fp32 scales
 * ([kv_head][slot] each for KV_QUANT_TOKEN, [kv_head][head_dim] for
 * KV_QUANT_CHANNEL), padded to 16 bytes. 0 when a count is 0 or the
 * dtype or scheme is unknown. Products are in 64 bits. An opaque
 * "layer" is one run: run_bytes.
 */
static inline __u64 kv_geometry_layer_bytes(const struct kv_geometry *g)
{
	__u64 v = (__u64)2 * g->kv_heads * g->block_tokens * g->head_dim *
		  kv_dtype_bytes(g->dtype);

	if (g->dtype == KV_DTYPE_OPAQUE)
		return g->quant || !g->block_tokens ? 0 : (__u64)g->run_bytes;
	switch (g->quant) {
	case KV_QUANT_NONE:
		return v;
	case KV_QUANT_TOKEN:
		v += (__u64)2 * g->kv_heads * g->block_tokens * 4;
		break;
	case KV_QUANT_CHANNEL:
		v += (__u64)2 * g->kv_heads * g->head_dim * 4;
		break;
	default:
		return 0;
	}
	return (v + 15) & ~(__u64)15;
}

/*
 * Bytes of one block of geometry @g: layers * kv_geometry_layer_bytes,
 * rounded up to 256 bytes when quantized; 0 when a count is 0 or the
 * dtype or scheme unknown. Unquantized: layers * 2 * kv_heads *
 * block_tokens * head_dim * dtype bytes exactly.
 */
static inline __u64 kv_geometry_block_bytes(const struct kv_geometry *g)
{
	__u64 b = (__u64)g->layers * kv_geometry_layer_bytes(g);

	return g->quant ? (b + 255) & ~(__u64)255 : b;
}

/* Layout proofs: every struct here has the same size on every ABI. */
#ifdef __cplusplus
#define KV_STATIC_ASSERT(c, m)	static_assert(c, m)
#else
#define KV_STATIC_ASSERT(c, m)	_Static_assert(c, m)
#endif
KV_STATIC_ASSERT(sizeof(struct kv_geometry) == 32, "kv_geometry");
KV_STATIC_ASSERT(sizeof(struct kv_sqe) == 64, "kv_sqe must be 64 bytes");
KV_STATIC_ASSERT(sizeof(struct kv_cqe) == 16, "kv_cqe must be 16 bytes");
KV_STATIC_ASSERT(sizeof(struct kv_hello) == 160, "kv_hello");
KV_STATIC_ASSERT(sizeof(struct kv_ring_offsets) == 64, "kv_ring_offsets");
KV_STATIC_ASSERT(offsetof(struct kv_sqe, user_data) == 16, "kv_sqe.user_data");
KV_STATIC_ASSERT(offsetof(struct kv_welcome, ring) % 8 == 0, "kv_welcome.ring");
KV_STATIC_ASSERT(sizeof(struct kv_stats) % 8 == 0, "kv_stats");
KV_STATIC_ASSERT(sizeof(struct kv_welcome) % 8 == 0, "kv_welcome");
KV_STATIC_ASSERT(offsetof(struct kv_welcome, ipc_handle) % 8 == 0, "kv_welcome.ipc_handle");
KV_STATIC_ASSERT(sizeof(struct kv_extent_msg) == 40, "kv_extent_msg");
KV_STATIC_ASSERT(sizeof(struct kv_ctx_policy) == 16, "kv_ctx_policy");
KV_STATIC_ASSERT(sizeof(struct kv_admin_tier) == 112, "kv_admin_tier");
KV_STATIC_ASSERT(KV_WELCOME_SIZE_3_2 % 8 == 0, "kv_welcome 3.2");
KV_STATIC_ASSERT(sizeof(struct kv_admin_ns) % 8 == 0, "kv_admin_ns");
KV_STATIC_ASSERT(sizeof(struct kv_admin_client) % 8 == 0, "kv_admin_client");
KV_STATIC_ASSERT(sizeof(struct kv_commit) == 40, "kv_commit");
KV_STATIC_ASSERT(sizeof(struct kv_admin_check) == 128, "kv_admin_check");
KV_STATIC_ASSERT(sizeof(struct kv_admin_status) == 120, "kv_admin_status");
KV_STATIC_ASSERT(sizeof(struct kv_admin_tenant) % 8 == 0, "kv_admin_tenant");
KV_STATIC_ASSERT(sizeof(struct kv_admin_prefix) % 8 == 0, "kv_admin_prefix");
KV_STATIC_ASSERT(sizeof(struct kv_admin_prefix) == 136, "kv_admin_prefix");
KV_STATIC_ASSERT(sizeof(struct kv_stats) == 120, "kv_stats");
KV_STATIC_ASSERT(sizeof(struct kv_admin_tree_node) == 40, "kv_admin_tree_node");
KV_STATIC_ASSERT(sizeof(struct kv_admin_pin_req) == 48, "kv_admin_pin_req");
KV_STATIC_ASSERT(sizeof(struct kv_admin_pin) == 32, "kv_admin_pin");
KV_STATIC_ASSERT(sizeof(struct kv_admin_op) == 184, "kv_admin_op");

#endif /* KV_ABI_H */
