// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: the module: hash_blocks, the types, the constants (ABI,
 * retention's PRIO_DEFAULT, PRIO_MAX, PIN_MAX_MS).
 */
#include "kvd_py.h"

PyObject *kvd_error;		/* kvd.Error(OSError) */

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

DOC(hash_blocks, "hash_blocks(tokens, block_tokens, parent=None, start=0, algo='xxh3',\n"
"lora_id=None, cache_salt=None) -> [16-byte hash, ...]: the chained hash of\n"
"every full block (kv_hash_blocks(3)); a partial last block gets none.\n"
"lora_id: the adapter's name (str); cache_salt: str (its UTF-8) or bytes.");

static PyMethodDef mod_methods[] = {
	{ "hash_blocks", (PyCFunction)(void (*)(void))mod_hash_blocks,
	  METH_VARARGS | METH_KEYWORDS, hash_blocks_doc },
	{ 0 },
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
	    PyModule_AddIntConstant(m, "PRIO_DEFAULT", KV_PRIO_DEFAULT) ||
	    PyModule_AddIntConstant(m, "PRIO_MAX", KV_PRIO_MAX) ||
	    PyModule_AddIntConstant(m, "PIN_MAX_MS", (long)KV_PIN_MAX_MS) ||
	    PyModule_AddStringConstant(m, "VERSION", KV_VERSION)) {
		Py_XDECREF(kvd_error);
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(kvd_error);	/* the module's reference, and ours */
	return m;
}
