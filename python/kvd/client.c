// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: kvd.Client: connect, close, what WELCOME said, block
 * memory; its type, whose request methods are requests.c's and seq.c's.
 */
#include "kvd_py.h"

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
		"connect_timeout_ms", "call_timeout_ms", "lease_ms",
		"max_context", NULL,
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
			"s|$zzO&O&O&O&ssO&O&O&O&siiiiO&",
			kwlist, &p.model_id, &p.socket_path, &p.model_rev,
			conv_u32, &p.geom.layers, conv_u32, &p.geom.kv_heads,
			conv_u32, &p.geom.head_dim, conv_u32, &p.geom.block_tokens,
			&dtype, &quant, conv_u32, &p.geom.tp_rank,
			conv_u32, &p.geom.tp_size, conv_u32, &p.sq_entries,
			conv_u32, &p.data_bytes, &algo,
			&p.spin_us, &p.connect_timeout_ms, &p.call_timeout_ms,
			&p.lease_ms, conv_u32, &p.max_context))
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

/*
 * Close every Seq, then disconnect: kvd releases what is still held. In
 * a forked child, only forget it all: the connection is the parent's.
 */
int client_close_locked(client_object *self)
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

static PyObject *client_ctx_info(client_object *self, PyObject *unused)
{
	struct kv_ctx_policy def;
	uint32_t max, refused;
	PyObject *l;
	char buf[96];

	if (client_enter(self))
		return NULL;
	kv_ctx_info(self->c, &max, &refused, &def);
	client_leave(self);
	if (kv_ctx_policy_format(&def, buf, sizeof(buf)) < 0)
		snprintf(buf, sizeof(buf), "kind %u", def.kind);
	l = PyList_New(0);
	for (int k = 0; l && k < KV_CTX__MAX; k++) {
		static const char *const names[KV_CTX__MAX] = {
			"none", "truncate", "window", "sinks" };
		PyObject *n;

		if (refused & (1U << k))
			continue;
		n = PyUnicode_FromString(names[k]);
		if (!n || PyList_Append(l, n)) {
			Py_XDECREF(n);
			Py_CLEAR(l);
			break;
		}
		Py_DECREF(n);
	}
	if (!l)
		return NULL;
	return Py_BuildValue("{s:I,s:s,s:N}", "max_context", max,
			     "default", buf, "supported", l);
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

DOC(client, "Client(model_id, *, socket_path=None, model_rev=None, layers, kv_heads,\n"
"       head_dim, block_tokens=16, dtype='fp16', quant='none', tp_rank=0,\n"
"       tp_size=0, sq_entries=0, data_bytes=0, hash_algo='xxh3', spin_us=0,\n"
"       connect_timeout_ms=0, call_timeout_ms=0, lease_ms=0, max_context=0)\n\n"
"A connection to kvd for one model (kv_connect(3)): HELLO with the model's\n"
"geometry, the ring and the pool mapped. Zero means libkvclient's default\n"
"(socket: $KVD_SOCKET, else kvd's default path). dtype is one of fp16,\n"
"bf16, fp32, fp8_e4m3, int8, or opaque (blocks kvd does not interpret:\n"
"layers runs of head_dim bytes each, kv_heads 1; see kvd.opaque_geometry).\n"
"max_context: tokens one Seq may hold (the model's context length), 0 none.\n"
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
DOC(ctx_info, "ctx_info() -> dict: the namespace's context settings (kv_ctx_info(3)):\n"
"max_context (0: none), default (the policy seq_open applies, as text) and\n"
"supported (the policy kinds its model takes).");
DOC(seq_open, "seq_open(tokens, lora_id=None, cache_salt=None, policy=None) -> Seq:\n"
"prompt lookup and allocation in one round trip (kv_seq_open(3)). lora_id:\n"
"the adapter's name (str); cache_salt: str or bytes; policy: the context\n"
"policy as text ('window 4096', 'sinks 4 4092 bos', 'truncate drop', ...;\n"
"kv_seq_open_policy(3)), None for the namespace's default.");
DOC(seq_open_hashes, "seq_open_hashes(hashes, tail=()) -> Seq: from precomputed full-block\n"
"hashes and the partial last block's tokens (kv_seq_open_hashes(3)).");

static PyMethodDef client_methods[] = {
	{ "close", (PyCFunction)client_close, METH_NOARGS, close_doc },
	{ "__enter__", (PyCFunction)client_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)client_exit_ctx, METH_VARARGS, NULL },
	{ "pool_info", (PyCFunction)client_pool_info, METH_NOARGS, pool_info_doc },
	{ "ctx_info", (PyCFunction)client_ctx_info, METH_NOARGS, ctx_info_doc },
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
	{ 0 },
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
	{ 0 },
};

PyTypeObject client_type = {
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
