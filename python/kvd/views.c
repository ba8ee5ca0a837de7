// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: views of a Client's pool mapping: a buffer (host), or
 * __cuda_array_interface__ (cuda); close() waits for the last.
 */
#include "kvd_py.h"

PyObject *view_new(client_object *self, char *addr, Py_ssize_t len)
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

PyTypeObject hostmem_type = {
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
	{ 0 },
};

static PySequenceMethods cudamem_as_seq = {
	.sq_length = (lenfunc)cudamem_length,
};

PyTypeObject cudamem_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "kvd.CudaMemory",
	.tp_basicsize = sizeof(view_object),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Device memory of a kvd pool mapping (__cuda_array_interface__).",
	.tp_dealloc = (destructor)view_dealloc,
	.tp_getset = cudamem_getset,
	.tp_as_sequence = &cudamem_as_seq,
};
