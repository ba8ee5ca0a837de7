// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: the CPython binding of libkvclient (Python engines, and the
 * vLLM plug-in kvd.vllm above it). No second implementation of the
 * protocol: every call is one libkvclient call.
 *
 * Rules, for every method below:
 *  - A call that can wait for kvd (connect, every request) releases the
 *    GIL while it waits. A Client serialises its own calls with a lock
 *    of its own, so threads may share one; libkvclient's "one thread at
 *    a time per client" holds under it.
 *  - Errors raise kvd.Error, a subclass of OSError: .errno is the errno
 *    libkvclient returned (negated), str() names the call and kvd's
 *    reason where it has one (kv_connect's errbuf, the quota that
 *    refused, kv_last_error()).
 *  - A Client belongs to the process that made it: in a child forked
 *    since, its calls raise EPERM and closing it only forgets it (the
 *    connection, and the blocks it holds, stay the parent's).
 *  - Block memory (pool_memory, block_memory) is a view of this
 *    process's mapping of the pool: a writable buffer on the host
 *    backend, an object with __cuda_array_interface__ (version 3) on
 *    cuda. While a view lives, close() refuses (EBUSY): the mapping is
 *    never unmapped under a live view.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <kv/kv.h>

static PyObject *kvd_error;		/* kvd.Error(OSError) */

/* Round trips (2 ms apart) block_addrs waits for an extent kvd owes us. */
#define EXTENT_TRIES	50

/* How long close() waits for requests left in flight (wait=False). */
#define CLOSE_WAIT_NS	1000000000LL

typedef struct seq_object seq_object;

typedef struct {
	PyObject_HEAD
	struct kv_client	*c;	/* NULL once closed */
	PyThread_type_lock	lock;	/* one call at a time */
	Py_ssize_t		views;	/* live pool/block views */
	seq_object		*seqs;	/* open Seqs, closed with us */
	struct kv_pool_info	info;
	unsigned		block_tokens;
	uint32_t		data_bytes;
	/* release(ids, wait=False): RELEASEs in flight, their ids in the
	 * data area from 0 up to def_off; reaped before the next call
	 * that needs the ring to itself (every other one) */
	unsigned		deferred;
	uint32_t		def_off;
	unsigned long long	def_failed;	/* of them, refused by kvd */
	int			def_err;	/* the last refusal's -errno */
	int64_t			timeout_ns;	/* call_timeout_ms, -1: none */
	pid_t			pid;		/* the process that connected */
	int			close_pending;	/* a with ended under live views */
	/* a sync call timed out: libkvclient may still owe its completion,
	 * and nothing deferred may go out before it came (same data area) */
	int			maybe_orphan;
	/* kv_seqs whose Seq went while the lock was held (a collection in
	 * one of our own calls): closed by the next call */
	struct kv_seq		**zombies;
	Py_ssize_t		nr_zombies, cap_zombies;
} client_object;

struct seq_object {
	PyObject_HEAD
	client_object		*client;	/* a reference */
	struct kv_seq		*s;	/* NULL once closed */
	seq_object		*next, **pprev;	/* on client->seqs */
};

/* A view of [addr, addr + len) of a client's pool mapping. */
typedef struct {
	PyObject_HEAD
	client_object		*client;	/* a reference */
	char			*addr;
	Py_ssize_t		len;
} view_object;

static PyTypeObject client_type, seq_type, hostmem_type, cudamem_type;

/* ---- errors ------------------------------------------------------------ */

/* Raise kvd.Error(-@ret, "@what: @reason"); NULL for the caller. */
static PyObject *raise_kv(int ret, const char *what, const char *reason)
{
	char msg[KV_ERRMSG_MAX + 160];
	PyObject *exc;
	int err = ret < 0 ? -ret : ret;

	if (!reason || !*reason)
		reason = strerror(err);
	snprintf(msg, sizeof(msg), "%s: %s", what, reason);
	exc = PyObject_CallFunction(kvd_error, "is", err, msg);
	if (exc) {
		PyErr_SetObject(kvd_error, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* Which quota refused the client, from kvd's note (kv_stats). */
static void quota_reason(struct kv_client *c, char *b, size_t n)
{
	struct kv_stats st;

	if (kv_stats(c, &st))
		st.quota_why = KV_QUOTA_NONE;
	switch (st.quota_why) {
	case KV_QUOTA_NAMESPACE:
		snprintf(b, n, "namespace quota: the model's max_pages (%u pages) reached",
			 st.quota_limit);
		break;
	case KV_QUOTA_TENANT:
		snprintf(b, n, "tenant quota: its max_pages (%u pages) reached",
			 st.quota_limit);
		break;
	case KV_QUOTA_CLIENT:
		snprintf(b, n, "client quota: max_client_blocks (%u references) held",
			 st.quota_limit);
		break;
	default:
		snprintf(b, n, "%s", strerror(EDQUOT));
	}
}

/* A failed request of @self (its lock still held: kv_stats is a call). */
static PyObject *raise_call(client_object *self, int ret, const char *what)
{
	char reason[192] = "";

	if (ret == -EDQUOT)
		quota_reason(self->c, reason, sizeof(reason));
	else if (ret == -ENOSPC)
		snprintf(reason, sizeof(reason),
			 "%s: every block of the pool is held, none cached to evict",
			 strerror(ENOSPC));
	else if (ret == -ECONNRESET)
		snprintf(reason, sizeof(reason),
			 "kvd went away (stopped, restarted, or ended this client): reconnect with a new Client");
	else if (ret == -EBUSY)
		snprintf(reason, sizeof(reason),
			 "an earlier call that timed out is still unanswered (kvd stopped or wedged): try again");
	if (ret == -ETIMEDOUT)
		self->maybe_orphan = 1;
	return raise_kv(ret, what, reason);
}

/* A kv_seq_* call failed: its reason (kv_last_error), noting a timeout. */
static PyObject *raise_seq(client_object *self, int ret, const char *what)
{
	if (ret == -ETIMEDOUT)
		self->maybe_orphan = 1;
	if (ret == -EBUSY || ret == -ECONNRESET)
		return raise_call(self, ret, what);
	return raise_kv(ret, what, kv_last_error(self->c));
}

/* ---- the client's lock --------------------------------------------------- */

/*
 * Take @self's lock, waiting without the GIL: a thread holding the lock
 * takes the GIL back before it lets the lock go.
 */
static void client_lock(client_object *self)
{
	if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
		Py_BEGIN_ALLOW_THREADS
		PyThread_acquire_lock(self->lock, WAIT_LOCK);
		Py_END_ALLOW_THREADS
	}
}

/*
 * Reap the CQEs of deferred RELEASEs: those ready, or (@wait) all of
 * them, sleeping without the GIL. A kvd that went away answers none:
 * they are dropped, and the next call says -ECONNRESET itself.
 */
static int reap_deferred(client_object *self, int wait)
{
	struct kv_cqe *cqe;
	int ret;

	while (self->deferred) {
		ret = kv_peek_cqe(self->c, &cqe);
		if (ret == -EAGAIN && wait) {
			Py_BEGIN_ALLOW_THREADS
			ret = kv_wait_cqe_timeout(self->c, &cqe, self->timeout_ns);
			Py_END_ALLOW_THREADS
			if (ret == -ETIME)
				return -ETIMEDOUT;	/* still in flight */
		}
		if (ret == -EAGAIN)
			return 0;
		if (ret) {		/* kvd went away: they were dropped */
			self->deferred = 0;
			self->def_off = 0;
			return ret;
		}
		if (cqe->res < 0) {
			self->def_failed++;
			self->def_err = cqe->res;
		}
		kv_cqe_seen(self->c, cqe);
		self->deferred--;
	}
	self->def_off = 0;
	return 0;
}

static void seq_close_now(client_object *self, struct kv_seq *s);

/* Close what Seqs a collection dropped while we held the lock. */
static void close_zombies(client_object *self)
{
	while (self->nr_zombies)
		seq_close_now(self, self->zombies[--self->nr_zombies]);
}

/* A call in a child forked since the Client connected: refuse it. */
static int forked(client_object *self)
{
	if (self->pid == getpid())
		return 0;
	raise_kv(-EPERM, "kvd.Client",
		 "the client belongs to the process that made it, not to this forked child: make a new Client here");
	return 1;
}

/*
 * client_lock(), then the ring to ourselves (deferred RELEASEs reaped,
 * unless @shared); -1 with an error if @self is (or got) closed.
 */
static int client_enter_ring(client_object *self, int shared)
{
	int ret;

	if (!self->c) {
		raise_kv(-EBADF, "kvd.Client", "the client is closed");
		return -1;
	}
	if (forked(self))
		return -1;
	client_lock(self);
	if (!self->c) {		/* closed while we waited */
		PyThread_release_lock(self->lock);
		raise_kv(-EBADF, "kvd.Client", "the client is closed");
		return -1;
	}
	ret = reap_deferred(self, !shared);
	if (ret) {
		PyThread_release_lock(self->lock);
		if (ret == -ETIMEDOUT)
			raise_kv(ret, "kvd.Client",
				 "kvd did not answer a request left in flight (release or commit, wait=False) within call_timeout_ms");
		else
			raise_call(self, ret, "kvd.Client");
		return -1;
	}
	if (!self->deferred)
		close_zombies(self);
	return 0;
}

static int client_enter(client_object *self)
{
	return client_enter_ring(self, 0);
}

static void client_leave(client_object *self)
{
	PyThread_release_lock(self->lock);
}

/* ---- argument conversion --------------------------------------------------- */

/* An int (or anything with __index__) in [0, 2^32); ValueError else. */
static int u32_from(PyObject *o, uint32_t *out, const char *what)
{
	PyObject *i = PyNumber_Index(o);
	long long v;

	if (!i)
		return -1;
	v = PyLong_AsLongLong(i);
	Py_DECREF(i);
	if ((v == -1 && PyErr_Occurred()) || v < 0 || v > UINT32_MAX) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s must be an int in [0, 2**32)", what);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* PyArg "O&" converter of u32_from. */
static int conv_u32(PyObject *o, void *out)
{
	return u32_from(o, out, "an argument") ? 0 : 1;
}

/* A sequence of ints in [0, 2^32) into a new array; *nr its length. */
static uint32_t *u32_array(PyObject *seq, const char *what, Py_ssize_t *nr)
{
	PyObject *fast;
	uint32_t *a;
	Py_ssize_t n;

	if (PyBytes_Check(seq) || PyByteArray_Check(seq) || PyUnicode_Check(seq)) {
		PyErr_Format(PyExc_TypeError, "%s: a sequence of ints, not %s", what,
			     Py_TYPE(seq)->tp_name);
		return NULL;
	}
	fast = PySequence_Fast(seq, what);
	if (!fast)
		return NULL;
	n = PySequence_Fast_GET_SIZE(fast);
	a = PyMem_Malloc((n ? n : 1) * sizeof(*a));
	if (!a) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		if (u32_from(PySequence_Fast_GET_ITEM(fast, i), &a[i], what)) {
			PyErr_Format(PyExc_ValueError,
				     "%s: item %zd is not an int in [0, 2**32)",
				     what, i);
			PyMem_Free(a);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	*nr = n;
	return a;
}

/* One 16-byte hash from a bytes-like object (None: all zero, the root). */
static int hash_from(PyObject *o, struct kv_hash *h, const char *what)
{
	Py_buffer b;

	if (o == Py_None) {
		memset(h, 0, sizeof(*h));
		return 0;
	}
	if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE))
		return -1;
	if (b.len != 16) {
		PyErr_Format(PyExc_ValueError, "%s: a block hash is 16 bytes, not %zd",
			     what, b.len);
		PyBuffer_Release(&b);
		return -1;
	}
	memcpy(h->b, b.buf, 16);
	PyBuffer_Release(&b);
	return 0;
}

/*
 * Hashes: a list or tuple of 16-byte bytes-like objects, or one packed
 * bytes-like of 16 * n bytes. A new array, *nr hashes long.
 */
static struct kv_hash *hash_array(PyObject *o, const char *what,
				  Py_ssize_t *nr)
{
	struct kv_hash *a;
	PyObject *fast;
	Py_buffer b;
	Py_ssize_t n;

	if (PyObject_CheckBuffer(o)) {
		if (PyObject_GetBuffer(o, &b, PyBUF_SIMPLE))
			return NULL;
		if (b.len % 16) {
			PyErr_Format(PyExc_ValueError,
				     "%s: packed hashes are 16 bytes each, not %zd bytes in all",
				     what, b.len);
			PyBuffer_Release(&b);
			return NULL;
		}
		*nr = b.len / 16;
		a = PyMem_Malloc(b.len ? b.len : 16);
		if (a)
			memcpy(a, b.buf, b.len);
		PyBuffer_Release(&b);
		return a ? a : (struct kv_hash *)PyErr_NoMemory();
	}
	fast = PySequence_Fast(o, what);
	if (!fast)
		return NULL;
	n = PySequence_Fast_GET_SIZE(fast);
	a = PyMem_Malloc((n ? n : 1) * sizeof(*a));
	if (!a) {
		Py_DECREF(fast);
		return (struct kv_hash *)PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		if (hash_from(PySequence_Fast_GET_ITEM(fast, i), &a[i], what)) {
			PyMem_Free(a);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	*nr = n;
	return a;
}

static PyObject *id_list(const kv_block_t *ids, Py_ssize_t nr)
{
	PyObject *l = PyList_New(nr);

	for (Py_ssize_t i = 0; l && i < nr; i++) {
		PyObject *v = PyLong_FromUnsignedLong(ids[i]);

		if (!v) {
			Py_DECREF(l);
			return NULL;
		}
		PyList_SET_ITEM(l, i, v);
	}
	return l;
}

static PyObject *hash_bytes(const struct kv_hash *h)
{
	return PyBytes_FromStringAndSize((const char *)h->b, 16);
}

/* Look up @name in a NULL-ended table of names; -1 with ValueError. */
static int name_index(const char *const *names, const char *name,
		      const char *what)
{
	for (int i = 0; names[i]; i++)
		if (names[i][0] && !strcmp(names[i], name))
			return i;
	PyErr_Format(PyExc_ValueError, "unknown %s '%s'", what, name);
	return -1;
}

static const char *const dtype_names[] = {
	[KV_DTYPE_FP16] = "fp16", [KV_DTYPE_BF16] = "bf16",
	[KV_DTYPE_FP32] = "fp32", [KV_DTYPE_FP8_E4M3] = "fp8_e4m3",
	[KV_DTYPE_INT8] = "int8", [KV_DTYPE_OPAQUE] = "opaque", NULL,
};
static const char *const quant_names[] = {
	[KV_QUANT_NONE] = "none", [KV_QUANT_TOKEN] = "token",
	[KV_QUANT_CHANNEL] = "channel", NULL,
};
static const char *const hash_names[] = {
	[KV_HASH_XXH3_128] = "xxh3", [KV_HASH_SHA256] = "sha256", NULL,
};

/* ---- Client: connect and close ---------------------------------------------- */

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	client_object *self = (client_object *)type->tp_alloc(type, 0);

	if (!self)
		return NULL;
	self->lock = PyThread_allocate_lock();
	if (!self->lock) {
		Py_DECREF(self);
		return PyErr_NoMemory();
	}
	return (PyObject *)self;
}

static int client_init(client_object *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = {
		"model_id", "socket_path", "model_rev", "layers", "kv_heads",
		"head_dim", "block_tokens", "dtype", "quant", "tp_rank",
		"tp_size", "sq_entries", "data_bytes", "hash_algo", "spin_us",
		"connect_timeout_ms", "call_timeout_ms", "lease_ms", NULL,
	};
	struct kv_connect_params p = { 0 };
	const char *dtype = "fp16", *quant = "none", *algo = "xxh3";
	char errbuf[KV_ERRMSG_MAX + 64] = "";
	struct kv_client *c = NULL;
	int ret, d, q, h;

	if (self->c) {
		PyErr_SetString(PyExc_RuntimeError, "kvd.Client is already connected");
		return -1;
	}
	p.geom.block_tokens = 16;
	if (!PyArg_ParseTupleAndKeywords(args, kw,
			"s|$zzO&O&O&O&ssO&O&O&O&siiii",
			kwlist, &p.model_id, &p.socket_path, &p.model_rev,
			conv_u32, &p.geom.layers, conv_u32, &p.geom.kv_heads,
			conv_u32, &p.geom.head_dim, conv_u32, &p.geom.block_tokens,
			&dtype, &quant, conv_u32, &p.geom.tp_rank,
			conv_u32, &p.geom.tp_size, conv_u32, &p.sq_entries,
			conv_u32, &p.data_bytes, &algo,
			&p.spin_us, &p.connect_timeout_ms, &p.call_timeout_ms,
			&p.lease_ms))
		return -1;
	d = name_index(dtype_names, dtype, "dtype");
	q = d < 0 ? -1 : name_index(quant_names, quant, "quant");
	h = q < 0 ? -1 : name_index(hash_names, algo, "hash_algo");
	if (h < 0)
		return -1;
	p.geom.dtype = (uint32_t)d;
	p.geom.quant = (uint32_t)q;
	p.hash_algo = h;
	p.errbuf = errbuf;
	p.errbuf_len = sizeof(errbuf);
	Py_BEGIN_ALLOW_THREADS
	ret = kv_connect(&p, &c);
	Py_END_ALLOW_THREADS
	if (ret) {
		raise_kv(ret, "kv_connect", errbuf);
		return -1;
	}
	self->c = c;
	self->pid = getpid();
	self->timeout_ns = p.call_timeout_ms > 0 ?
			   (int64_t)p.call_timeout_ms * 1000000 : -1;
	kv_pool_info(c, &self->info);
	self->block_tokens = p.geom.block_tokens;
	self->data_bytes = kv_data_bytes(c);
	return 0;
}

static void seq_drop(seq_object *so);

/*
 * Close every Seq, then disconnect: kvd releases what is still held. In
 * a forked child, only forget it all: the connection is the parent's.
 */
static int client_close_locked(client_object *self)
{
	struct kv_client *c = self->c;

	self->close_pending = 0;
	if (self->pid != getpid()) {
		while (self->seqs)
			seq_drop(self->seqs);
		self->nr_zombies = 0;
		self->c = NULL;
		return 0;
	}
	while (self->seqs)
		seq_drop(self->seqs);
	close_zombies(self);
	self->c = NULL;
	Py_BEGIN_ALLOW_THREADS
	kv_disconnect(c);
	Py_END_ALLOW_THREADS
	return 0;
}

static PyObject *client_close(client_object *self, PyObject *unused)
{
	int64_t saved;
	int ret;

	if (!self->c)
		Py_RETURN_NONE;
	if (self->views)
		return raise_kv(-EBUSY, "kvd.Client.close",
				"views of the pool (pool_memory, block_memory) are still alive");
	if (self->pid != getpid()) {	/* a forked child: forget it */
		client_lock(self);
		client_close_locked(self);
		client_leave(self);
		Py_RETURN_NONE;
	}
	/* what is in flight gets a second to be answered, not for ever */
	saved = self->timeout_ns;
	if (self->timeout_ns < 0 || self->timeout_ns > CLOSE_WAIT_NS)
		self->timeout_ns = CLOSE_WAIT_NS;
	ret = client_enter(self);
	self->timeout_ns = saved;
	if (ret) {
		if (!PyErr_ExceptionMatches(kvd_error))
			return NULL;
		/* kvd gone or not answering: disconnect all the same */
		PyErr_Clear();
		client_lock(self);
		if (self->c)
			client_close_locked(self);
	} else {
		client_close_locked(self);
	}
	client_leave(self);
	Py_RETURN_NONE;
}

static void client_dealloc(client_object *self)
{
	/* views and Seqs hold references: none is left here */
	if (self->c)
		client_close_locked(self);
	PyMem_Free(self->zombies);
	if (self->lock)
		PyThread_free_lock(self->lock);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_enter_ctx(client_object *self, PyObject *unused)
{
	Py_INCREF(self);
	return (PyObject *)self;
}

static PyObject *client_exit_ctx(client_object *self, PyObject *args)
{
	PyObject *r;

	if (self->views) {	/* views outlive the with: close with the last */
		self->close_pending = 1;
		Py_RETURN_FALSE;
	}
	r = client_close(self, NULL);
	Py_XDECREF(r);
	if (!r)
		return NULL;
	Py_RETURN_FALSE;
}

/* ---- Client: information ------------------------------------------------------ */

static PyObject *client_pool_info(client_object *self, PyObject *unused)
{
	const struct kv_pool_info *i = &self->info;

	if (!self->c)
		return raise_kv(-EBADF, "kvd.Client.pool_info", "the client is closed");
	return Py_BuildValue("{s:s,s:i,s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:i,s:i,s:K}",
			     "backend", i->backend == KV_BACKEND_CUDA ? "cuda" : "host",
			     "device", i->device,
			     "base", (unsigned long long)(uintptr_t)i->base,
			     "pool_bytes", (unsigned long long)i->pool_bytes,
			     "block_bytes", (unsigned long long)i->block_bytes,
			     "slab_bytes", (unsigned long long)i->slab_bytes,
			     "max_blocks", i->max_blocks,
			     "client_id", i->client_id,
			     "ns_id", i->ns_id,
			     "export_kind", i->export_kind,
			     "kvd_device", i->kvd_device,
			     "boot_id", (unsigned long long)kv_boot_id(self->c));
}

static PyObject *client_get_u64(client_object *self, void *field)
{
	uintptr_t f = (uintptr_t)field;

	switch (f) {
	case 0: return PyLong_FromUnsignedLongLong(self->info.block_bytes);
	case 1: return PyLong_FromUnsignedLong(self->info.max_blocks);
	case 2: return PyLong_FromUnsignedLongLong(self->info.pool_bytes);
	case 3: return PyLong_FromUnsignedLongLong(kv_boot_id(self->c));
	case 4: return PyLong_FromUnsignedLong(self->block_tokens);
	case 5: return PyLong_FromUnsignedLong(self->info.client_id);
	case 6: return PyLong_FromUnsignedLong(self->info.ns_id);
	}
	Py_RETURN_NONE;
}

static PyObject *client_get_backend(client_object *self, void *unused)
{
	return PyUnicode_FromString(self->info.backend == KV_BACKEND_CUDA ?
				    "cuda" : "host");
}

static PyObject *client_get_closed(client_object *self, void *unused)
{
	return PyBool_FromLong(!self->c);
}

static PyObject *client_get_last_error(client_object *self, void *unused)
{
	return PyUnicode_FromString(self->c ? kv_last_error(self->c) : "");
}

/* ---- Client: block memory --------------------------------------------------- */

static PyObject *view_new(client_object *self, char *addr, Py_ssize_t len)
{
	PyTypeObject *t = self->info.backend == KV_BACKEND_CUDA ?
			  &cudamem_type : &hostmem_type;
	view_object *v = PyObject_New(view_object, t);

	if (!v)
		return NULL;
	Py_INCREF(self);
	v->client = self;
	v->addr = addr;
	v->len = len;
	self->views++;
	if (t == &cudamem_type)
		return (PyObject *)v;
	/* host: a memoryview of it, which keeps it alive */
	{
		PyObject *mv = PyMemoryView_FromObject((PyObject *)v);

		Py_DECREF(v);
		return mv;
	}
}

static PyObject *client_pool_memory(client_object *self, PyObject *unused)
{
	if (!self->c)
		return raise_kv(-EBADF, "kvd.Client.pool_memory", "the client is closed");
	return view_new(self, self->info.base, (Py_ssize_t)self->info.pool_bytes);
}

/*
 * The address of block @id here, mapping its extent on first use. An id
 * another process got (a scheduler's, for its workers) may name an
 * extent kvd has not sent this client yet (it sends them after WELCOME,
 * some later when the socket is full): a few round trips wait for it.
 */
static int block_addr(client_object *self, unsigned long id, char **addr)
{
	int ret = 0;

	if (id >= self->info.max_blocks) {
		raise_kv(-EINVAL, "kv_block_ptr", "block id outside the namespace");
		return -1;
	}
	*addr = kv_block_ptr(self->c, (kv_block_t)id);
	for (int i = 0; !*addr && !ret && i < EXTENT_TRIES; i++) {
		Py_BEGIN_ALLOW_THREADS
		ret = kv_nop(self->c);
		*addr = kv_block_ptr(self->c, (kv_block_t)id);
		if (!ret && !*addr)
			usleep(2000);
		Py_END_ALLOW_THREADS
	}
	if (!*addr) {
		raise_kv(-ENXIO, "kv_block_ptr",
			 "the block's extent is not mapped here, or kvd went away");
		return -1;
	}
	return 0;
}

static PyObject *client_block_memory(client_object *self, PyObject *arg)
{
	uint32_t id;
	char *addr;
	int ret;

	if (u32_from(arg, &id, "block_memory: id"))
		return NULL;
	if (client_enter(self))
		return NULL;
	ret = block_addr(self, id, &addr);
	client_leave(self);
	if (ret)
		return NULL;
	return view_new(self, addr, (Py_ssize_t)self->info.block_bytes);
}

/*
 * block_addrs(ids): each block's address in this process (host pointer or
 * device pointer), mapping extents kvd has sent; raises for any missing.
 */
static PyObject *client_block_addrs(client_object *self, PyObject *arg)
{
	PyObject *l = NULL;
	Py_ssize_t nr = 0;
	uint32_t *ids = u32_array(arg, "block_addrs: ids", &nr);

	if (!ids)
		return NULL;
	if (client_enter(self))
		goto out;
	l = PyList_New(nr);
	for (Py_ssize_t i = 0; l && i < nr; i++) {
		PyObject *v;
		char *addr;

		if (block_addr(self, ids[i], &addr)) {
			Py_CLEAR(l);
			break;
		}
		v = PyLong_FromUnsignedLongLong((uintptr_t)addr);
		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, i, v);
	}
	client_leave(self);
out:
	PyMem_Free(ids);
	return l;
}

/* ---- Client: requests --------------------------------------------------------- */

/* Ids of a request must fit the data area the sync calls use. */
static int ids_room(client_object *self, Py_ssize_t nr, size_t elem,
		    const char *what)
{
	if ((size_t)nr * elem > self->data_bytes || nr > KV_MAX_IDS) {
		raise_kv(-E2BIG, what, "more entries than one request carries (data_bytes)");
		return -1;
	}
	return 0;
}

static PyObject *client_alloc(client_object *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "n", "wait_ms", NULL };
	uint32_t n, wait_ms = 0;
	PyObject *r = NULL;
	kv_block_t *ids;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O&", kwlist, conv_u32, &n,
					 conv_u32, &wait_ms))
		return NULL;
	if (!n)
		return PyList_New(0);
	if (client_enter(self))
		return NULL;
	if (ids_room(self, n, 4, "kv_alloc"))
		goto out;
	ids = PyMem_Malloc((size_t)n * sizeof(*ids));
	if (!ids) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = wait_ms ? kv_alloc_wait(self->c, n, ids, wait_ms) :
			kv_alloc(self->c, n, ids);
	Py_END_ALLOW_THREADS
	r = ret < 0 ? raise_call(self, ret, "kv_alloc") : id_list(ids, ret);
	PyMem_Free(ids);
out:
	client_leave(self);
	return r;
}

enum ids_op { IDS_RELEASE, IDS_REF, IDS_COW };

/* release, ref, cow: an id list in, a count (cow: the new ids) out. */
static PyObject *ids_call(client_object *self, PyObject *arg, enum ids_op op)
{
	static const char *const what[] = { "kv_release", "kv_ref", "kv_cow" };
	PyObject *r = NULL;
	Py_ssize_t nr = 0;
	uint32_t *ids = u32_array(arg, what[op], &nr);
	int ret;

	if (!ids)
		return NULL;
	if (!nr) {
		PyMem_Free(ids);
		return op == IDS_COW ? PyList_New(0) : PyLong_FromLong(0);
	}
	if (client_enter(self))
		goto out;
	if (ids_room(self, nr, 4, what[op]))
		goto out_leave;
	Py_BEGIN_ALLOW_THREADS
	switch (op) {
	case IDS_RELEASE:
		ret = kv_release(self->c, ids, (unsigned)nr);
		break;
	case IDS_REF:
		ret = kv_ref(self->c, ids, (unsigned)nr);
		break;
	default:
		ret = kv_cow(self->c, ids, (unsigned)nr);
	}
	Py_END_ALLOW_THREADS
	if (ret < 0)
		r = raise_call(self, ret, what[op]);
	else
		r = op == IDS_COW ? id_list(ids, nr) : PyLong_FromLong(ret);
out_leave:
	client_leave(self);
out:
	PyMem_Free(ids);
	return r;
}

/*
 * release(ids, wait=False): one RELEASE SQE published, its completion
 * reaped by a later call. A queue or data area that is full takes the
 * oldest back first.
 */
/*
 * An SQE whose completion nobody waits for, its @bytes of @data copied
 * to the data area at *off (8-aligned, after the others in flight); the
 * caller preps it and calls defer_submit. NULL (raised) when there is no
 * room even once the others are reaped.
 */
static struct kv_sqe *defer_sqe(client_object *self, const void *data,
				size_t bytes, uint32_t *off, const char *what)
{
	struct kv_sqe *sqe;
	void *dst;
	int ret;

	if (self->maybe_orphan) {
		/* a sync call reaps the late completion (libkvclient gives
		 * back what it took); until it came, nothing may go out */
		Py_BEGIN_ALLOW_THREADS
		ret = kv_nop(self->c);
		Py_END_ALLOW_THREADS
		if (ret) {
			raise_call(self, ret, what);
			return NULL;
		}
		self->maybe_orphan = 0;
	}
	if (self->def_off + bytes > self->data_bytes ||
	    !kv_sq_space_left(self->c)) {
		ret = reap_deferred(self, 1);
		if (ret) {
			raise_call(self, ret, what);
			return NULL;
		}
	}
	dst = kv_data_ptr(self->c, self->def_off, (uint32_t)bytes);
	sqe = dst ? kv_get_sqe(self->c) : NULL;
	if (!sqe) {
		raise_kv(-EBUSY, what, "no room in the ring");
		return NULL;
	}
	memcpy(dst, data, bytes);
	*off = self->def_off;
	return sqe;
}

static int defer_submit(client_object *self, size_t bytes, const char *what)
{
	int ret = kv_submit(self->c);

	if (ret < 0) {
		raise_call(self, ret, what);
		return -1;
	}
	self->def_off += (uint32_t)((bytes + 7) & ~(size_t)7);
	self->deferred++;
	return 0;
}

static PyObject *release_deferred(client_object *self, const uint32_t *ids,
				  Py_ssize_t nr)
{
	size_t bytes = (size_t)nr * 4;
	struct kv_sqe *sqe;
	uint32_t off;

	sqe = defer_sqe(self, ids, bytes, &off, "kv_release");
	if (!sqe)
		return NULL;
	kv_prep_release(sqe, off, (unsigned)nr);
	if (defer_submit(self, bytes, "kv_release"))
		return NULL;
	return PyLong_FromSsize_t(nr);
}

static PyObject *client_release(client_object *self, PyObject *args,
				PyObject *kw)
{
	static char *kwlist[] = { "ids", "wait", NULL };
	PyObject *arg, *r = NULL;
	int wait = 1;
	Py_ssize_t nr;
	uint32_t *ids;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &arg, &wait))
		return NULL;
	if (wait)
		return ids_call(self, arg, IDS_RELEASE);
	ids = u32_array(arg, "kv_release", &nr);
	if (!ids)
		return NULL;
	if (!nr) {
		PyMem_Free(ids);
		return PyLong_FromLong(0);
	}
	if (client_enter_ring(self, 1))
		goto out;
	if (!ids_room(self, nr, 4, "kv_release"))
		r = release_deferred(self, ids, nr);
	client_leave(self);
out:
	PyMem_Free(ids);
	return r;
}

/* flush(): wait for every deferred RELEASE; their refusals, if any. */
static PyObject *client_flush(client_object *self, PyObject *unused)
{
	if (client_enter(self))
		return NULL;
	client_leave(self);
	return PyLong_FromUnsignedLongLong(self->def_failed);
}

static PyObject *client_get_deferred(client_object *self, void *unused)
{
	return Py_BuildValue("{s:I,s:K,s:i}", "in_flight", self->deferred,
			     "failed", self->def_failed,
			     "last_errno", -self->def_err);
}

static PyObject *client_ref(client_object *self, PyObject *arg)
{
	return ids_call(self, arg, IDS_REF);
}

static PyObject *client_cow(client_object *self, PyObject *arg)
{
	return ids_call(self, arg, IDS_COW);
}

static PyObject *client_lookup(client_object *self, PyObject *arg)
{
	PyObject *r = NULL;
	kv_block_t *ids = NULL;
	Py_ssize_t nr = 0;
	struct kv_hash *h = hash_array(arg, "kv_lookup: hashes", &nr);
	int ret;

	if (!h)
		return NULL;
	if (!nr) {
		PyMem_Free(h);
		return PyList_New(0);
	}
	if (client_enter(self))
		goto out;
	if (ids_room(self, nr, 20, "kv_lookup"))
		goto out_leave;
	ids = PyMem_Malloc((size_t)nr * sizeof(*ids));
	if (!ids) {
		PyErr_NoMemory();
		goto out_leave;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = kv_lookup(self->c, h, (unsigned)nr, ids);
	Py_END_ALLOW_THREADS
	r = ret < 0 ? raise_call(self, ret, "kv_lookup") : id_list(ids, ret);
out_leave:
	client_leave(self);
out:
	PyMem_Free(ids);
	PyMem_Free(h);
	return r;
}

static PyObject *client_alloc_prefix(client_object *self, PyObject *args)
{
	PyObject *hashes, *r = NULL, *l;
	kv_block_t *ids = NULL;
	struct kv_hash *h;
	unsigned nr_blocks;
	Py_ssize_t nr = 0;
	int ret;

	if (!PyArg_ParseTuple(args, "OO&", &hashes, conv_u32, &nr_blocks))
		return NULL;
	h = hash_array(hashes, "kv_alloc_prefix: hashes", &nr);
	if (!h)
		return NULL;
	if (nr > nr_blocks) {
		raise_kv(-EINVAL, "kv_alloc_prefix", "more hashes than blocks asked for");
		goto out;
	}
	if (!nr_blocks) {
		r = Py_BuildValue("(i[])", 0);
		goto out;
	}
	if (client_enter(self))
		goto out;
	if (ids_room(self, nr_blocks + 4 * nr, 4, "kv_alloc_prefix"))
		goto out_leave;
	ids = PyMem_Malloc((size_t)nr_blocks * sizeof(*ids));
	if (!ids) {
		PyErr_NoMemory();
		goto out_leave;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = kv_alloc_prefix(self->c, h, (unsigned)nr, nr_blocks, ids);
	Py_END_ALLOW_THREADS
	if (ret < 0) {
		raise_call(self, ret, "kv_alloc_prefix");
		goto out_leave;
	}
	l = id_list(ids, nr_blocks);
	if (l)
		r = Py_BuildValue("(iN)", ret, l);
out_leave:
	client_leave(self);
out:
	PyMem_Free(ids);
	PyMem_Free(h);
	return r;
}

/* commit([(id, hash, parent), ...]) -> [(id, dedup), ...] */
static struct kv_commit *commit_entries(PyObject *arg, Py_ssize_t *nr)
{
	PyObject *fast = PySequence_Fast(arg, "kv_commit: entries");
	struct kv_commit *e;
	Py_ssize_t n;

	if (!fast)
		return NULL;
	n = PySequence_Fast_GET_SIZE(fast);
	e = PyMem_Calloc(n ? n : 1, sizeof(*e));
	if (!e) {
		Py_DECREF(fast);
		return (struct kv_commit *)PyErr_NoMemory();
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
		PyObject *hash, *parent = Py_None;

		if (!PyTuple_Check(item)) {
			PyErr_Format(PyExc_TypeError,
				     "kv_commit: entry %zd is not a tuple (id, hash, parent)", i);
			PyMem_Free(e);
			Py_DECREF(fast);
			return NULL;
		}
		if (!PyArg_ParseTuple(item,
				      "O&O|O;kv_commit: an entry is (id, hash, parent)",
				      conv_u32, &e[i].id, &hash, &parent) ||
		    hash_from(hash, &e[i].hash, "kv_commit: hash") ||
		    hash_from(parent, &e[i].parent, "kv_commit: parent")) {
			PyMem_Free(e);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	*nr = n;
	return e;
}

/*
 * commit(..., release=True): one COMMIT with KV_COMMIT_AND_RELEASE
 * (kv_prep_commit_release), published; with @wait its completion (the
 * entries, in place) is reaped now, else by a later call.
 */
static int commit_release(client_object *self, struct kv_commit *e,
			  Py_ssize_t nr, int wait)
{
	size_t bytes = (size_t)nr * sizeof(*e);
	unsigned long long failed = self->def_failed;
	int last_err = self->def_err, ret;
	struct kv_sqe *sqe;
	uint32_t off;

	sqe = defer_sqe(self, e, bytes, &off, "kv_commit");
	if (!sqe)
		return -1;
	kv_prep_commit_release(sqe, off, (unsigned)nr);
	if (defer_submit(self, bytes, "kv_commit"))
		return -1;
	if (!wait)
		return 0;
	ret = reap_deferred(self, 1);
	if (ret) {
		raise_call(self, ret, "kv_commit");
		return -1;
	}
	if (self->def_failed != failed) {	/* ours, the last reaped */
		self->def_failed = failed;
		ret = self->def_err;
		self->def_err = last_err;
		raise_call(self, ret, "kv_commit");
		return -1;
	}
	memcpy(e, kv_data_ptr(self->c, off, (uint32_t)bytes), bytes);
	return 0;
}

static PyObject *client_commit(client_object *self, PyObject *args,
			       PyObject *kw)
{
	static char *kwlist[] = { "entries", "release", "wait", NULL };
	PyObject *arg, *r = NULL;
	int release = 0, wait = 1;
	Py_ssize_t nr = 0;
	struct kv_commit *e;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pp", kwlist, &arg,
					 &release, &wait))
		return NULL;
	if (!wait && !release) {
		PyErr_SetString(PyExc_ValueError,
			"commit(wait=False) needs release=True: a dedup's ids come in the answer");
		return NULL;
	}
	e = commit_entries(arg, &nr);
	if (!e)
		return NULL;
	if (!nr) {
		PyMem_Free(e);
		return wait ? PyList_New(0) : Py_NewRef(Py_None);
	}
	if (client_enter_ring(self, !wait))
		goto out;
	if (ids_room(self, nr, sizeof(*e), "kv_commit"))
		goto out_leave;
	if (release) {
		if (commit_release(self, e, nr, wait))
			goto out_leave;
		if (!wait) {
			r = Py_NewRef(Py_None);
			goto out_leave;
		}
		ret = (int)nr;
	} else {
		Py_BEGIN_ALLOW_THREADS
		ret = kv_commit(self->c, e, (unsigned)nr);
		Py_END_ALLOW_THREADS
	}
	if (ret < 0) {
		raise_call(self, ret, "kv_commit");
		goto out_leave;
	}
	r = PyList_New(nr);
	for (Py_ssize_t i = 0; r && i < nr; i++) {
		PyObject *t = Py_BuildValue("(IO)", e[i].id,
					    e[i].flags & KV_COMMIT_DEDUP ?
					    Py_True : Py_False);

		if (!t) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, i, t);
	}
out_leave:
	client_leave(self);
out:
	PyMem_Free(e);
	return r;
}

static PyObject *stats_dict(const struct kv_stats *s)
{
	return Py_BuildValue("{s:K,s:I,s:I,s:I,s:I,s:I,s:I,s:K,s:I,s:I,s:I,s:I,"
			     "s:I,s:I,s:K,s:K,s:K,s:K,s:I,s:I,s:K}",
		"pool_bytes", (unsigned long long)s->pool_bytes,
		"nr_pages", s->nr_pages, "pages_used", s->pages_used,
		"pages_free", s->pages_free, "peak_pages_used", s->peak_pages_used,
		"nr_clients", s->nr_clients, "nr_namespaces", s->nr_namespaces,
		"block_bytes", (unsigned long long)s->block_bytes,
		"ns_slabs", s->ns_slabs, "ns_blocks", s->ns_blocks,
		"ns_blocks_used", s->ns_blocks_used,
		"ns_max_blocks", s->ns_max_blocks,
		"client_blocks", s->client_blocks, "client_refs", s->client_refs,
		"ops", (unsigned long long)s->ops,
		"lookups", (unsigned long long)s->lookups,
		"hit_blocks", (unsigned long long)s->hit_blocks,
		"evictions", (unsigned long long)s->evictions,
		"cached_blocks", s->cached_blocks,
		"committed_blocks", s->committed_blocks,
		"lookup_blocks", (unsigned long long)s->lookup_blocks);
}

static PyObject *client_stats(client_object *self, PyObject *unused)
{
	struct kv_stats st;
	int ret;

	if (client_enter(self))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_stats(self->c, &st);
	Py_END_ALLOW_THREADS
	client_leave(self);
	return ret ? raise_call(self, ret, "kv_stats") : stats_dict(&st);
}

/* nop and heartbeat: a call with no argument and no result. */
static PyObject *client_simple(client_object *self, int heartbeat)
{
	int ret;

	if (client_enter(self))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = heartbeat ? kv_heartbeat(self->c) : kv_nop(self->c);
	Py_END_ALLOW_THREADS
	if (ret)
		raise_call(self, ret, heartbeat ? "kv_heartbeat" : "kv_nop");
	client_leave(self);
	if (ret)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *client_nop(client_object *self, PyObject *unused)
{
	return client_simple(self, 0);
}

static PyObject *client_heartbeat(client_object *self, PyObject *unused)
{
	return client_simple(self, 1);
}

/* ---- Seq ----------------------------------------------------------------- */

static PyObject *seq_wrap(client_object *self, struct kv_seq *s)
{
	seq_object *so = PyObject_New(seq_object, &seq_type);

	if (!so) {
		kv_seq_close(s);
		return NULL;
	}
	Py_INCREF(self);
	so->client = self;
	so->s = s;
	so->next = self->seqs;
	if (so->next)
		so->next->pprev = &so->next;
	so->pprev = &self->seqs;
	self->seqs = so;
	return (PyObject *)so;
}

/* Take @so off its client's list (the GIL guards it): its kv_seq. */
static struct kv_seq *seq_unlink(seq_object *so)
{
	struct kv_seq *s = so->s;

	if (!s)
		return NULL;
	so->s = NULL;
	*so->pprev = so->next;
	if (so->next)
		so->next->pprev = so->pprev;
	return s;
}

/* kv_seq_close @s (its blocks released); the client locked, ring ours. */
static void seq_close_now(client_object *self, struct kv_seq *s)
{
	if (self->pid != getpid())
		return;		/* the parent's refs: not ours to drop */
	Py_BEGIN_ALLOW_THREADS
	kv_seq_close(s);
	Py_END_ALLOW_THREADS
}

/* Close @so's kv_seq and unlink it; client locked, ring ours. */
static void seq_drop(seq_object *so)
{
	struct kv_seq *s = seq_unlink(so);

	if (s)
		seq_close_now(so->client, s);
}

/*
 * A Seq went while its client's lock was held (a collection run inside
 * one of the client's own calls, or another thread's call): its
 * kv_seq is closed by the next call. Out of memory, it stays open until
 * the client closes (kvd releases it then).
 */
static void seq_bury(client_object *self, struct kv_seq *s)
{
	if (self->nr_zombies == self->cap_zombies) {
		Py_ssize_t cap = self->cap_zombies ? 2 * self->cap_zombies : 8;
		struct kv_seq **z = PyMem_Realloc(self->zombies, cap * sizeof(*z));

		if (!z)
			return;
		self->zombies = z;
		self->cap_zombies = cap;
	}
	self->zombies[self->nr_zombies++] = s;
}

static const char *const seq_open_kw[] = { "tokens", "lora_id", "cache_salt", NULL };

static PyObject *client_seq_open(client_object *self, PyObject *args, PyObject *kw)
{
	struct kv_extra_keys ex = { 0 };
	PyObject *tokens, *r = NULL;
	const char *salt = NULL;
	Py_ssize_t nr, salt_len = 0;
	struct kv_seq *s;
	uint32_t *tok;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zz#", (char **)seq_open_kw,
					 &tokens, &ex.lora_id, &salt, &salt_len))
		return NULL;
	ex.cache_salt = salt;
	ex.cache_salt_len = (size_t)salt_len;
	tok = u32_array(tokens, "kv_seq_open: tokens", &nr);
	if (!tok)
		return NULL;
	if (client_enter(self))
		goto out;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_open(self->c, tok, (size_t)nr, &ex, &s);
	Py_END_ALLOW_THREADS
	if (ret)
		raise_seq(self, ret, "kv_seq_open");
	else
		r = seq_wrap(self, s);
	client_leave(self);
out:
	PyMem_Free(tok);
	return r;
}

static PyObject *client_seq_open_hashes(client_object *self, PyObject *args,
					PyObject *kw)
{
	static char *kwlist[] = { "hashes", "tail", NULL };
	PyObject *hashes, *tail = NULL, *r = NULL, *empty = NULL;
	struct kv_hash *h;
	uint32_t *t = NULL;
	Py_ssize_t nh, nt = 0;
	struct kv_seq *s;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O", kwlist, &hashes, &tail))
		return NULL;
	h = hash_array(hashes, "kv_seq_open_hashes: hashes", &nh);
	if (!h)
		return NULL;
	if (!tail)
		tail = empty = PyTuple_New(0);
	t = tail ? u32_array(tail, "kv_seq_open_hashes: tail", &nt) : NULL;
	Py_XDECREF(empty);
	if (!t || client_enter(self))
		goto out;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_open_hashes(self->c, h, (size_t)nh, t, (size_t)nt, &s);
	Py_END_ALLOW_THREADS
	if (ret)
		raise_seq(self, ret, "kv_seq_open_hashes");
	else
		r = seq_wrap(self, s);
	client_leave(self);
out:
	PyMem_Free(t);
	PyMem_Free(h);
	return r;
}

/* Lock the Seq's client; -1 with an error if either is closed. */
static int seq_enter(seq_object *so)
{
	if (client_enter(so->client))
		return -1;
	if (!so->s) {
		client_leave(so->client);
		raise_kv(-EBADF, "kvd.Seq", "the sequence is closed");
		return -1;
	}
	return 0;
}

static PyObject *seq_append(seq_object *so, PyObject *arg)
{
	Py_ssize_t nr = 0;
	uint32_t *tok = u32_array(arg, "kv_seq_append: tokens", &nr);
	PyObject *r = NULL;
	int ret;

	if (!tok)
		return NULL;
	if (seq_enter(so))
		goto out;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_append(so->s, tok, (size_t)nr);
	Py_END_ALLOW_THREADS
	if (ret < 0)
		raise_seq(so->client, ret, "kv_seq_append");
	else
		r = Py_NewRef(Py_None);
	client_leave(so->client);
out:
	PyMem_Free(tok);
	return r;
}

static PyObject *seq_commit(seq_object *so, PyObject *unused)
{
	int ret;

	if (seq_enter(so))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_commit(so->s);
	Py_END_ALLOW_THREADS
	if (ret < 0)
		raise_seq(so->client, ret, "kv_seq_commit");
	client_leave(so->client);
	if (ret < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *seq_fork(seq_object *so, PyObject *unused)
{
	struct kv_seq *child;
	PyObject *r = NULL;
	int ret;

	if (seq_enter(so))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_fork(so->s, &child);
	Py_END_ALLOW_THREADS
	if (ret)
		raise_seq(so->client, ret, "kv_seq_fork");
	else
		r = seq_wrap(so->client, child);
	client_leave(so->client);
	return r;
}

static PyObject *seq_close(seq_object *so, PyObject *unused)
{
	if (!so->s || !so->client->c)
		Py_RETURN_NONE;
	if (client_enter(so->client))
		return NULL;
	seq_drop(so);
	client_leave(so->client);
	Py_RETURN_NONE;
}

static PyObject *seq_get_block_table(seq_object *so, void *unused)
{
	const kv_block_t *t;
	uint32_t nr = 0;

	if (!so->s)
		return PyList_New(0);
	t = kv_seq_block_table(so->s, &nr);
	return id_list(t, nr);
}

static PyObject *seq_get_hit_tokens(seq_object *so, void *unused)
{
	return PyLong_FromSize_t(so->s ? kv_seq_hit_tokens(so->s) : 0);
}

static PyObject *seq_get_closed(seq_object *so, void *unused)
{
	return PyBool_FromLong(!so->s);
}

static Py_ssize_t seq_length(seq_object *so)
{
	return so->s ? (Py_ssize_t)kv_seq_len(so->s) : 0;
}

static PyObject *seq_enter_ctx(seq_object *so, PyObject *unused)
{
	Py_INCREF(so);
	return (PyObject *)so;
}

static PyObject *seq_exit_ctx(seq_object *so, PyObject *args)
{
	PyObject *r = seq_close(so, NULL);

	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

/* Never waits for the lock: a collection may run inside a call of ours. */
static void seq_dealloc(seq_object *so)
{
	client_object *self = so->client;
	struct kv_seq *s = seq_unlink(so);

	if (s && self->c && self->pid == getpid()) {
		if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
			seq_bury(self, s);
		} else {
			if (reap_deferred(self, 1))
				seq_bury(self, s);
			else
				seq_close_now(self, s);
			PyThread_release_lock(self->lock);
		}
	}
	Py_XDECREF(self);
	PyObject_Free(so);
}

/* ---- views -------------------------------------------------------------- */

/* The last view of a Client whose with has ended closes it. */
static void view_dealloc(view_object *v)
{
	client_object *self = v->client;

	if (!--self->views && self->close_pending && self->c &&
	    PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
		if (self->pid != getpid() || !reap_deferred(self, 1))
			client_close_locked(self);
		PyThread_release_lock(self->lock);
	}
	Py_DECREF(self);
	PyObject_Free(v);
}

static int hostmem_getbuffer(view_object *v, Py_buffer *b, int flags)
{
	return PyBuffer_FillInfo(b, (PyObject *)v, v->addr, v->len, 0, flags);
}

static PyBufferProcs hostmem_as_buffer = {
	.bf_getbuffer = (getbufferproc)hostmem_getbuffer,
};

static PyObject *cudamem_interface(view_object *v, void *unused)
{
	return Py_BuildValue("{s:(n),s:s,s:(KO),s:O,s:i}",
			     "shape", v->len, "typestr", "|u1",
			     "data", (unsigned long long)(uintptr_t)v->addr,
			     Py_False, "strides", Py_None, "version", 3);
}

static PyObject *cudamem_get_ptr(view_object *v, void *unused)
{
	return PyLong_FromUnsignedLongLong((uintptr_t)v->addr);
}

static Py_ssize_t cudamem_length(view_object *v)
{
	return v->len;
}

/* ---- module functions ----------------------------------------------------- */

static PyObject *mod_hash_blocks(PyObject *mod, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "tokens", "block_tokens", "parent", "start",
				  "algo", "lora_id", "cache_salt", NULL };
	PyObject *tokens, *parent = Py_None, *r = NULL;
	const char *algo = "xxh3", *salt = NULL;
	struct kv_extra_keys ex = { 0 };
	Py_ssize_t nr, salt_len = 0, start = 0;
	struct kv_hash ph, *out = NULL;
	unsigned block_tokens;
	uint32_t *tok;
	int a, ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|Onszz#", kwlist, &tokens,
			conv_u32,
			&block_tokens, &parent, &start, &algo, &ex.lora_id,
			&salt, &salt_len))
		return NULL;
	a = name_index(hash_names, algo, "hash algo");
	if (a < 0 || hash_from(parent, &ph, "hash_blocks: parent"))
		return NULL;
	if (start < 0 || !block_tokens)
		return raise_kv(-EINVAL, "kv_hash_blocks",
				"start must be >= 0 and block_tokens >= 1");
	ex.cache_salt = salt;
	ex.cache_salt_len = (size_t)salt_len;
	tok = u32_array(tokens, "kv_hash_blocks: tokens", &nr);
	if (!tok)
		return NULL;
	out = PyMem_Malloc((nr / block_tokens + 1) * sizeof(*out));
	if (!out) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = kv_hash_blocks(a, &ph, (size_t)start, tok, (size_t)nr,
			     block_tokens, &ex, out);
	Py_END_ALLOW_THREADS
	if (ret < 0) {
		raise_kv(ret, "kv_hash_blocks", NULL);
		goto out;
	}
	r = PyList_New(ret);
	for (int i = 0; r && i < ret; i++) {
		PyObject *h = hash_bytes(&out[i]);

		if (!h) {
			Py_CLEAR(r);
			break;
		}
		PyList_SET_ITEM(r, i, h);
	}
out:
	PyMem_Free(out);
	PyMem_Free(tok);
	return r;
}

/* ---- type tables ----------------------------------------------------------- */

#define DOC(name, text)	PyDoc_STRVAR(name##_doc, text)

DOC(client, "Client(model_id, *, socket_path=None, model_rev=None, layers, kv_heads,\n"
"       head_dim, block_tokens=16, dtype='fp16', quant='none', tp_rank=0,\n"
"       tp_size=0, sq_entries=0, data_bytes=0, hash_algo='xxh3', spin_us=0,\n"
"       connect_timeout_ms=0, call_timeout_ms=0, lease_ms=0)\n\n"
"A connection to kvd for one model (kv_connect(3)): HELLO with the model's\n"
"geometry, the ring and the pool mapped. Zero means libkvclient's default\n"
"(socket: $KVD_SOCKET, else kvd's default path). dtype is one of fp16,\n"
"bf16, fp32, fp8_e4m3, int8, or opaque (blocks kvd does not interpret:\n"
"layers runs of head_dim bytes each, kv_heads 1; see kvd.opaque_geometry).\n"
"Raises kvd.Error with kvd's reason when it refuses.");
DOC(close, "close(): disconnect; kvd releases every block still held (open Seqs\n"
"are closed first). Idempotent. kvd.Error EBUSY while pool views live.");
DOC(pool_info, "pool_info() -> dict: backend ('host'|'cuda'), device, base (address of\n"
"the mapping), pool_bytes, block_bytes, slab_bytes, max_blocks, client_id,\n"
"ns_id, export_kind, kvd_device, boot_id (kv_pool_info(3), kv_boot_id(3)).");
DOC(pool_memory, "pool_memory() -> the whole pool mapping, pool_bytes long; block id i\n"
"at [i * block_bytes, (i + 1) * block_bytes). Host: a writable memoryview\n"
"(format 'B'; torch.frombuffer and numpy.frombuffer take it). Cuda: an\n"
"object with __cuda_array_interface__ (shape (pool_bytes,), '|u1') and .ptr.\n"
"Only blocks whose extents are mapped may be touched: call block_addrs()\n"
"for the ids first (it maps what kvd has sent).");
DOC(block_memory, "block_memory(id) -> one block's block_bytes, as pool_memory().");
DOC(block_addrs, "block_addrs(ids) -> [address, ...] of each block in this process\n"
"(host or device pointers), mapping extents kvd has sent; kvd.Error ENXIO\n"
"for a block not mapped here or once kvd is gone, EINVAL outside the\n"
"namespace. Does not check that this client holds them (kv_block_ptr(3)).");
DOC(alloc, "alloc(n, wait_ms=0) -> [id, ...]: n new blocks, one ref each, all or\n"
"nothing (kv_alloc(3)); wait_ms > 0 waits that long for room\n"
"(kv_alloc_wait(3)). kvd.Error ENOSPC, EDQUOT (which quota), E2BIG.");
DOC(release, "release(ids, wait=True) -> n: drop one ref per id (kv_release(3));\n"
"EPERM for an id not held, nothing changed on error. wait=False publishes\n"
"the request and returns at once (no round trip): its completion is\n"
"reaped by the next call, and a refusal only counted (deferred, flush()).");
DOC(flush, "flush() -> failed: wait for the deferred releases; how many kvd has\n"
"refused since the client connected (a bug of the caller: ids not held).");
DOC(ref, "ref(ids) -> n: one more ref per held id (kv_ref(3), fork).");
DOC(cow, "cow(ids) -> [id, ...]: copy-on-write before writing held blocks\n"
"(kv_cow(3)); the ids to write, new where a copy was made.");
DOC(lookup, "lookup(hashes) -> [id, ...]: the longest committed prefix of the\n"
"16-byte hashes (a list of bytes, or one packed bytes of 16 * n), a ref\n"
"taken on each hit (kv_lookup(3)); release them when done.");
DOC(alloc_prefix, "alloc_prefix(hashes, nr_blocks) -> (hits, ids): lookup, then new\n"
"blocks up to nr_blocks in all, in one round trip (kv_alloc_prefix(3));\n"
"ids[:hits] are cached blocks, the rest new. All or nothing.");
DOC(commit, "commit([(id, hash, parent), ...], release=False, wait=True)\n"
"-> [(id, dedup), ...]: publish held, written blocks under their hashes\n"
"(parent None or b'\\0'*16 at a sequence's start). dedup True: the hash\n"
"was already cached, the block given was released and id is the cached\n"
"block, now held (kv_commit(3)). release=True: then the refs on those\n"
"ids go too, in the same request (kv_prep_commit_release(3)); with\n"
"wait=False it returns None at once, the answer reaped by a later call\n"
"(a refusal only counted, as for release(wait=False)).");
DOC(stats, "stats() -> dict of struct kv_stats (kv_stats(3)).");
DOC(nop, "nop(): one round trip doing nothing (kv_nop(3)).");
DOC(heartbeat, "heartbeat(): keep a lease alive without a request (kv_heartbeat(3)).");
DOC(seq_open, "seq_open(tokens, lora_id=None, cache_salt=None) -> Seq: prompt lookup\n"
"and allocation in one round trip (kv_seq_open(3)). lora_id: the adapter's\n"
"name (str); cache_salt: str or bytes.");
DOC(seq_open_hashes, "seq_open_hashes(hashes, tail=()) -> Seq: from precomputed full-block\n"
"hashes and the partial last block's tokens (kv_seq_open_hashes(3)).");
DOC(seq, "A request's sequence (kv_seq_open(3)): block_table, hit_tokens, len(),\n"
"append(tokens), commit(), fork(), close(). Closed with its Client.");
DOC(hash_blocks, "hash_blocks(tokens, block_tokens, parent=None, start=0, algo='xxh3',\n"
"lora_id=None, cache_salt=None) -> [16-byte hash, ...]: the chained hash of\n"
"every full block (kv_hash_blocks(3)); a partial last block gets none.\n"
"lora_id: the adapter's name (str); cache_salt: str (its UTF-8) or bytes.");

static PyMethodDef client_methods[] = {
	{ "close", (PyCFunction)client_close, METH_NOARGS, close_doc },
	{ "__enter__", (PyCFunction)client_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)client_exit_ctx, METH_VARARGS, NULL },
	{ "pool_info", (PyCFunction)client_pool_info, METH_NOARGS, pool_info_doc },
	{ "pool_memory", (PyCFunction)client_pool_memory, METH_NOARGS, pool_memory_doc },
	{ "block_memory", (PyCFunction)client_block_memory, METH_O, block_memory_doc },
	{ "block_addrs", (PyCFunction)client_block_addrs, METH_O, block_addrs_doc },
	{ "alloc", (PyCFunction)(void (*)(void))client_alloc,
	  METH_VARARGS | METH_KEYWORDS, alloc_doc },
	{ "release", (PyCFunction)(void (*)(void))client_release,
	  METH_VARARGS | METH_KEYWORDS, release_doc },
	{ "flush", (PyCFunction)client_flush, METH_NOARGS, flush_doc },
	{ "ref", (PyCFunction)client_ref, METH_O, ref_doc },
	{ "cow", (PyCFunction)client_cow, METH_O, cow_doc },
	{ "lookup", (PyCFunction)client_lookup, METH_O, lookup_doc },
	{ "alloc_prefix", (PyCFunction)client_alloc_prefix, METH_VARARGS,
	  alloc_prefix_doc },
	{ "commit", (PyCFunction)(void (*)(void))client_commit,
	  METH_VARARGS | METH_KEYWORDS, commit_doc },
	{ "stats", (PyCFunction)client_stats, METH_NOARGS, stats_doc },
	{ "nop", (PyCFunction)client_nop, METH_NOARGS, nop_doc },
	{ "heartbeat", (PyCFunction)client_heartbeat, METH_NOARGS, heartbeat_doc },
	{ "seq_open", (PyCFunction)(void (*)(void))client_seq_open,
	  METH_VARARGS | METH_KEYWORDS, seq_open_doc },
	{ "seq_open_hashes", (PyCFunction)(void (*)(void))client_seq_open_hashes,
	  METH_VARARGS | METH_KEYWORDS, seq_open_hashes_doc },
	{ NULL },
};

static PyGetSetDef client_getset[] = {
	{ "block_bytes", (getter)client_get_u64, NULL, "bytes of one block", (void *)0 },
	{ "max_blocks", (getter)client_get_u64, NULL, "every id is below it", (void *)1 },
	{ "pool_bytes", (getter)client_get_u64, NULL, "bytes of the pool mapping", (void *)2 },
	{ "boot_id", (getter)client_get_u64, NULL,
	  "which run of kvd this is (kv_boot_id(3)): ids mean nothing across runs", (void *)3 },
	{ "block_tokens", (getter)client_get_u64, NULL, "tokens per block", (void *)4 },
	{ "client_id", (getter)client_get_u64, NULL, "kvd's number of this client", (void *)5 },
	{ "ns_id", (getter)client_get_u64, NULL, "the namespace's number (kvctl ns)", (void *)6 },
	{ "backend", (getter)client_get_backend, NULL, "'host' or 'cuda'", NULL },
	{ "closed", (getter)client_get_closed, NULL, "True once closed", NULL },
	{ "deferred", (getter)client_get_deferred, NULL,
	  "release(wait=False) requests: in_flight, failed, last_errno", NULL },
	{ "last_error", (getter)client_get_last_error, NULL,
	  "why the last failed Seq call failed (kv_last_error(3))", NULL },
	{ NULL },
};

static PyTypeObject client_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvd.Client",
	.tp_basicsize = sizeof(client_object),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = client_doc,
	.tp_new = client_new,
	.tp_init = (initproc)client_init,
	.tp_dealloc = (destructor)client_dealloc,
	.tp_methods = client_methods,
	.tp_getset = client_getset,
};

static PyMethodDef seq_methods[] = {
	{ "append", (PyCFunction)seq_append, METH_O,
	  "append(tokens): more tokens; a new block when one fills, the full\n"
	  "blocks written before this call committed (kv_seq_append(3))" },
	{ "commit", (PyCFunction)seq_commit, METH_NOARGS,
	  "commit(): commit every full block now (kv_seq_commit(3))" },
	{ "fork", (PyCFunction)seq_fork, METH_NOARGS,
	  "fork() -> Seq sharing every block (kv_seq_fork(3))" },
	{ "close", (PyCFunction)seq_close, METH_NOARGS,
	  "close(): release the blocks; committed ones stay cached" },
	{ "__enter__", (PyCFunction)seq_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)seq_exit_ctx, METH_VARARGS, NULL },
	{ NULL },
};

static PyGetSetDef seq_getset[] = {
	{ "block_table", (getter)seq_get_block_table, NULL, "[id, ...] in order", NULL },
	{ "hit_tokens", (getter)seq_get_hit_tokens, NULL,
	  "tokens whose KV was already in the pool at open", NULL },
	{ "closed", (getter)seq_get_closed, NULL, "True once closed", NULL },
	{ NULL },
};

static PySequenceMethods seq_as_seq = {
	.sq_length = (lenfunc)seq_length,
};

static PyTypeObject seq_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvd.Seq",
	.tp_basicsize = sizeof(seq_object),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = seq_doc,
	.tp_dealloc = (destructor)seq_dealloc,
	.tp_methods = seq_methods,
	.tp_getset = seq_getset,
	.tp_as_sequence = &seq_as_seq,
};

static PyTypeObject hostmem_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvd.HostMemory",
	.tp_basicsize = sizeof(view_object),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Host memory of a kvd pool mapping (buffer protocol).",
	.tp_dealloc = (destructor)view_dealloc,
	.tp_as_buffer = &hostmem_as_buffer,
};

static PyGetSetDef cudamem_getset[] = {
	{ "__cuda_array_interface__", (getter)cudamem_interface, NULL,
	  "Numba's CUDA array interface, version 3", NULL },
	{ "ptr", (getter)cudamem_get_ptr, NULL, "the device address", NULL },
	{ NULL },
};

static PySequenceMethods cudamem_as_seq = {
	.sq_length = (lenfunc)cudamem_length,
};

static PyTypeObject cudamem_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvd.CudaMemory",
	.tp_basicsize = sizeof(view_object),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Device memory of a kvd pool mapping (__cuda_array_interface__).",
	.tp_dealloc = (destructor)view_dealloc,
	.tp_getset = cudamem_getset,
	.tp_as_sequence = &cudamem_as_seq,
};

static PyMethodDef mod_methods[] = {
	{ "hash_blocks", (PyCFunction)(void (*)(void))mod_hash_blocks,
	  METH_VARARGS | METH_KEYWORDS, hash_blocks_doc },
	{ NULL },
};

static struct PyModuleDef kvd_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "kvd._kvd",
	.m_doc = "The CPython binding of libkvclient (see kvd-python(7)).",
	.m_size = -1,
	.m_methods = mod_methods,
};

static int add_type(PyObject *m, PyTypeObject *t, const char *name)
{
	if (PyType_Ready(t))
		return -1;
	Py_INCREF(t);
	if (PyModule_AddObject(m, name, (PyObject *)t)) {
		Py_DECREF(t);
		return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__kvd(void)
{
	PyObject *m = PyModule_Create(&kvd_module);

	if (!m)
		return NULL;
	kvd_error = PyErr_NewExceptionWithDoc("kvd.Error",
		"An error of libkvclient or kvd: an OSError with .errno and kvd's reason.",
		PyExc_OSError, NULL);
	if (!kvd_error || PyModule_AddObject(m, "Error", kvd_error) ||
	    add_type(m, &client_type, "Client") ||
	    add_type(m, &seq_type, "Seq") ||
	    add_type(m, &hostmem_type, "HostMemory") ||
	    add_type(m, &cudamem_type, "CudaMemory") ||
	    PyModule_AddIntConstant(m, "ABI_MAJOR", KV_ABI_MAJOR) ||
	    PyModule_AddIntConstant(m, "ABI_MINOR", KV_ABI_MINOR) ||
	    PyModule_AddIntConstant(m, "OPAQUE_RUN_MAX", KV_OPAQUE_RUN_MAX) ||
	    PyModule_AddStringConstant(m, "VERSION", KV_VERSION)) {
		Py_XDECREF(kvd_error);
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(kvd_error);	/* the module's reference, and ours */
	return m;
}
