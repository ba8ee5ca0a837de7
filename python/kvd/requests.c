// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: a Client's requests (blocks, the prefix cache, stats),
 * waited for, or published for the next call to reap (ring.c).
 */
#include "kvd_py.h"

PyObject *client_alloc(client_object *self, PyObject *args, PyObject *kw)
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
	/* beyond KV_MAX_IDS libkvclient refuses (E2BIG) before writing */
	ids = PyMem_Malloc((size_t)(n < KV_MAX_IDS ? n : KV_MAX_IDS) * sizeof(*ids));
	if (!ids) {
		PyErr_NoMemory();
		goto out;
	}
	Py_BEGIN_ALLOW_THREADS
	ret = wait_ms ? kv_alloc_wait(self->c, n, ids, wait_ms) :
			kv_alloc(self->c, n, ids);
	Py_END_ALLOW_THREADS
	r = ret < 0 ? raise_call(self, ret, wait_ms ? "kv_alloc_wait" : "kv_alloc") :
		      id_list(ids, ret);
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
static PyObject *release_deferred(client_object *self, const uint32_t *ids,
				  Py_ssize_t nr)
{
	size_t bytes = (size_t)nr * 4;
	struct kv_sqe *sqe;
	uint32_t off;

	sqe = defer_sqe(self, ids, nr, 4, &off, "kv_release");
	if (!sqe)
		return NULL;
	kv_prep_release(sqe, off, (unsigned)nr);
	if (defer_submit(self, bytes, "kv_release"))
		return NULL;
	return PyLong_FromSsize_t(nr);
}

PyObject *client_release(client_object *self, PyObject *args,
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
	r = release_deferred(self, ids, nr);
	client_leave(self);
out:
	PyMem_Free(ids);
	return r;
}

/* flush(): wait for every deferred RELEASE; their refusals, if any. */
PyObject *client_flush(client_object *self, PyObject *unused)
{
	if (client_enter(self))
		return NULL;
	client_leave(self);
	return PyLong_FromUnsignedLongLong(self->def_failed);
}

PyObject *client_get_deferred(client_object *self, void *unused)
{
	return Py_BuildValue("{s:I,s:K,s:i}", "in_flight", self->deferred,
			     "failed", self->def_failed,
			     "last_errno", -self->def_err);
}

PyObject *client_ref(client_object *self, PyObject *arg)
{
	return ids_call(self, arg, IDS_REF);
}

PyObject *client_cow(client_object *self, PyObject *arg)
{
	return ids_call(self, arg, IDS_COW);
}

PyObject *client_lookup(client_object *self, PyObject *arg)
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

PyObject *client_alloc_prefix(client_object *self, PyObject *args)
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
	ids = PyMem_Malloc((size_t)(nr_blocks < KV_MAX_IDS ? nr_blocks :
				    KV_MAX_IDS) * sizeof(*ids));
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

	sqe = defer_sqe(self, e, nr, sizeof(*e), &off, "kv_commit");
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

PyObject *client_commit(client_object *self, PyObject *args,
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

PyObject *client_stats(client_object *self, PyObject *unused)
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

PyObject *client_nop(client_object *self, PyObject *unused)
{
	return client_simple(self, 0);
}

PyObject *client_heartbeat(client_object *self, PyObject *unused)
{
	return client_simple(self, 1);
}
