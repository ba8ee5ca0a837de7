// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: argument conversion: ints, id lists, 16-byte hashes, names.
 */
#include "kvd_py.h"

/* An int (or anything with __index__) in [0, 2^32); ValueError else. */
int u32_from(PyObject *o, uint32_t *out, const char *what)
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
int conv_u32(PyObject *o, void *out)
{
	return u32_from(o, out, "an argument") ? 0 : 1;
}

/* A sequence of ints in [0, 2^32) into a new array; *nr its length. */
uint32_t *u32_array(PyObject *seq, const char *what, Py_ssize_t *nr)
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
int hash_from(PyObject *o, struct kv_hash *h, const char *what)
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
struct kv_hash *hash_array(PyObject *o, const char *what,
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

PyObject *id_list(const kv_block_t *ids, Py_ssize_t nr)
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

PyObject *hash_bytes(const struct kv_hash *h)
{
	return PyBytes_FromStringAndSize((const char *)h->b, 16);
}

/* Look up @name in a NULL-ended table of names; -1 with ValueError. */
int name_index(const char *const *names, const char *name,
	       const char *what)
{
	for (int i = 0; names[i]; i++)
		if (names[i][0] && !strcmp(names[i], name))
			return i;
	PyErr_Format(PyExc_ValueError, "unknown %s '%s'", what, name);
	return -1;
}

const char *const dtype_names[] = {
	[KV_DTYPE_FP16] = "fp16", [KV_DTYPE_BF16] = "bf16",
	[KV_DTYPE_FP32] = "fp32", [KV_DTYPE_FP8_E4M3] = "fp8_e4m3",
	[KV_DTYPE_INT8] = "int8", [KV_DTYPE_OPAQUE] = "opaque", NULL,
};
const char *const quant_names[] = {
	[KV_QUANT_NONE] = "none", [KV_QUANT_TOKEN] = "token",
	[KV_QUANT_CHANNEL] = "channel", NULL,
};
const char *const hash_names[] = {
	[KV_HASH_XXH3_128] = "xxh3", [KV_HASH_SHA256] = "sha256", NULL,
};
