// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: kvd.Seq: kv_seq, a request's sequence, closed with its Client.
 */
#include "kvd_py.h"

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
	so->retained = 0;
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
void seq_close_now(client_object *self, struct kv_seq *s)
{
	if (self->pid != getpid())
		return;		/* the parent's refs: not ours to drop */
	Py_BEGIN_ALLOW_THREADS
	kv_seq_close(s);
	Py_END_ALLOW_THREADS
}

/* Close @so's kv_seq and unlink it; client locked, ring ours. */
void seq_drop(seq_object *so)
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

static const char *const seq_open_kw[] = { "tokens", "lora_id", "cache_salt",
					   "policy", NULL };

PyObject *client_seq_open(client_object *self, PyObject *args, PyObject *kw)
{
	struct kv_extra_keys ex = { 0 };
	struct kv_ctx_policy pol, *pp = NULL;
	PyObject *tokens, *r = NULL;
	const char *salt = NULL, *policy = NULL;
	Py_ssize_t nr, salt_len = 0;
	struct kv_seq *s;
	uint32_t *tok;
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zz#z", (char **)seq_open_kw,
					 &tokens, &ex.lora_id, &salt, &salt_len,
					 &policy))
		return NULL;
	if (policy) {
		if (kv_ctx_policy_parse(policy, &pol))
			return raise_kv(-EINVAL, "kv_ctx_policy_parse",
					"not a policy: none, truncate [stop|drop], window W, sinks S W [bos|bos-extra]");
		pp = &pol;
	}
	ex.cache_salt = salt;
	ex.cache_salt_len = (size_t)salt_len;
	tok = u32_array(tokens, "kv_seq_open: tokens", &nr);
	if (!tok)
		return NULL;
	if (client_enter(self))
		goto out;
	Py_BEGIN_ALLOW_THREADS
	ret = kv_seq_open_policy(self->c, tok, (size_t)nr, &ex, pp, &s);
	Py_END_ALLOW_THREADS
	if (ret)
		raise_seq(self, ret, "kv_seq_open_policy");
	else
		r = seq_wrap(self, s);
	client_leave(self);
out:
	PyMem_Free(tok);
	return r;
}

PyObject *client_seq_open_hashes(client_object *self, PyObject *args,
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
	else	/* the tokens taken: fewer under truncate at max_context */
		r = PyLong_FromSsize_t(ret ? ret : nr);
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
	else if ((r = seq_wrap(so->client, child)))
		((seq_object *)r)->retained = so->retained;	/* inherited */
	client_leave(so->client);
	return r;
}

/*
 * close(): kv_seq_close. With a retention set (retain()), its RETAIN
 * is made here, and a failure of the close is raised (the Seq closed
 * all the same); without one, nothing is.
 */
static PyObject *seq_close(seq_object *so, PyObject *unused)
{
	struct kv_seq *s;
	int ret = 0, retained = so->retained;

	if (!so->s || !so->client->c)
		Py_RETURN_NONE;
	if (client_enter(so->client))
		return NULL;
	s = seq_unlink(so);
	if (s && so->client->pid == getpid()) {
		Py_BEGIN_ALLOW_THREADS
		ret = kv_seq_close(s);
		Py_END_ALLOW_THREADS
	}
	if (ret < 0 && retained)
		raise_seq(so->client, ret, "kv_seq_close");
	client_leave(so->client);
	if (ret < 0 && retained)
		return NULL;
	Py_RETURN_NONE;
}

/* An int (or anything with __index__) in [0, 2^64); ValueError else. */
static int conv_u64(PyObject *o, void *out)
{
	PyObject *i = PyNumber_Index(o);
	unsigned long long v;

	if (!i)
		return 0;
	v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_SetString(PyExc_ValueError,
				"an argument must be an int in [0, 2**64)");
		return 0;
	}
	*(uint64_t *)out = v;
	return 1;
}

/*
 * retain(priority=0, pin_ms=0, end=0): kv_seq_retain. kvd is asked at
 * close(); all zero clears it.
 */
static PyObject *seq_retain(seq_object *so, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "priority", "pin_ms", "end", NULL };
	struct kv_retention r = { 0 };
	int ret;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&O&O&", kwlist,
					 conv_u32, &r.priority,
					 conv_u64, &r.pin_ms, conv_u64, &r.end))
		return NULL;
	if (seq_enter(so))
		return NULL;
	ret = kv_seq_retain(so->s, &r);
	if (ret < 0)
		raise_seq(so->client, ret, "kv_seq_retain");
	else
		so->retained = r.priority || r.pin_ms;
	client_leave(so->client);
	if (ret < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *seq_range(seq_object *so, PyObject *unused)
{
	struct kv_seq_range r;
	char buf[96];

	if (seq_enter(so))
		return NULL;
	kv_seq_range(so->s, &r);
	client_leave(so->client);
	kv_ctx_policy_format(&r.policy, buf, sizeof(buf));
	return Py_BuildValue("{s:s,s:I,s:I,s:I,s:I,s:K,s:K,s:K,s:K}",
			     "policy", buf, "nr_blocks", r.nr_blocks,
			     "context_len", r.context_len,
			     "sink_len", r.sink_len,
			     "window_start", r.window_start,
			     "len", (unsigned long long)r.len,
			     "kept", (unsigned long long)r.kept,
			     "dropped", (unsigned long long)r.dropped,
			     "commit_end", (unsigned long long)r.commit_end);
}

static PyObject *seq_positions(seq_object *so, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "cache", NULL };
	int cache = 0, n;
	int64_t *pos = NULL;
	PyObject *l = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$p", kwlist, &cache))
		return NULL;
	if (seq_enter(so))
		return NULL;
	n = kv_seq_positions(so->s, 0, NULL, 0);
	pos = n > 0 ? PyMem_Malloc((size_t)n * sizeof(*pos)) : NULL;
	if (n > 0 && pos)
		kv_seq_positions(so->s, cache ? KV_POS_CACHE : KV_POS_ORIGINAL,
				 pos, (size_t)n);
	client_leave(so->client);
	if (n > 0 && !pos)
		return PyErr_NoMemory();
	l = PyList_New(n > 0 ? n : 0);
	for (int i = 0; l && i < n; i++) {
		PyObject *v = PyLong_FromLongLong(pos[i]);

		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, i, v);
	}
	PyMem_Free(pos);
	return l;
}

static PyObject *seq_get_hits(seq_object *so, void *unused)
{
	struct kv_seq_hits h = { 0 };

	if (so->s)
		kv_seq_hits(so->s, &h);
	return Py_BuildValue("{s:I,s:I,s:I}", "pool", h.pool, "host", h.host,
			     "disk", h.disk);
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

/* The with's end: close(); its failure is not raised over the body's. */
static PyObject *seq_exit_ctx(seq_object *so, PyObject *args)
{
	PyObject *r = seq_close(so, NULL);

	if (!r) {
		if (PyTuple_GET_SIZE(args) < 1 ||
		    PyTuple_GET_ITEM(args, 0) == Py_None)
			return NULL;
		PyErr_Clear();
		Py_RETURN_FALSE;
	}
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

DOC(seq, "A request's sequence (kv_seq_open(3)): block_table, hit_tokens, len(),\n"
"append(tokens), commit(), fork(), retain(...), close(). Closed with its Client.");

static PyMethodDef seq_methods[] = {
	{ "append", (PyCFunction)seq_append, METH_O,
	  "append(tokens) -> int: more tokens; a new block when one fills, the\n"
	  "full blocks written before this call committed, blocks out of the\n"
	  "policy's kept range released (kv_seq_append(3)); returns how many\n"
	  "it took (fewer under truncate at max_context)" },
	{ "range", (PyCFunction)seq_range, METH_NOARGS,
	  "range() -> dict: the kept range, in table space for the kernels'\n"
	  "masks (context_len, sink_len, window_start), and len, kept, dropped,\n"
	  "commit_end, policy (kv_seq_range(3))" },
	{ "positions", (PyCFunction)(void (*)(void))seq_positions,
	  METH_VARARGS | METH_KEYWORDS,
	  "positions(*, cache=False) -> [int]: the position of each slot of the\n"
	  "block table, -1 where no kept token is; original positions, or with\n"
	  "cache=True positions among the kept tokens (kv_seq_positions(3))" },
	{ "commit", (PyCFunction)seq_commit, METH_NOARGS,
	  "commit(): commit every full block now (kv_seq_commit(3))" },
	{ "fork", (PyCFunction)seq_fork, METH_NOARGS,
	  "fork() -> Seq sharing every block (kv_seq_fork(3))" },
	{ "retain", (PyCFunction)(void (*)(void))seq_retain,
	  METH_VARARGS | METH_KEYWORDS,
	  "retain(priority=0, pin_ms=0, end=0): how the committed blocks stay\n"
	  "in the pool after close() (kv_seq_retain(3)): their eviction\n"
	  "priority (1..PRIO_MAX, 0 leaves it; PRIO_DEFAULT until set), a pin\n"
	  "of pin_ms milliseconds (at most PIN_MAX_MS, 0 none), for the blocks\n"
	  "wholly below end tokens (0: all); kvd is asked at close(), which\n"
	  "then raises if it failed. All zero clears it" },
	{ "close", (PyCFunction)seq_close, METH_NOARGS,
	  "close(): release the blocks; committed ones stay cached (with a\n"
	  "retain(), its RETAIN first: raises if that failed, closed anyway)" },
	{ "__enter__", (PyCFunction)seq_enter_ctx, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)seq_exit_ctx, METH_VARARGS, NULL },
	{ 0 },
};

static PyGetSetDef seq_getset[] = {
	{ "block_table", (getter)seq_get_block_table, NULL, "[id, ...] in order", NULL },
	{ "hit_tokens", (getter)seq_get_hit_tokens, NULL,
	  "tokens whose KV was already in the pool at open", NULL },
	{ "hits", (getter)seq_get_hits, NULL,
	  "{'pool', 'host', 'disk'}: where the hit blocks came from\n"
	  "(kv_seq_hits(3): kvd's tiers behind the pool)", NULL },
	{ "closed", (getter)seq_get_closed, NULL, "True once closed", NULL },
	{ 0 },
};

static PySequenceMethods seq_as_seq = {
	.sq_length = (lenfunc)seq_length,
};

PyTypeObject seq_type = {
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
