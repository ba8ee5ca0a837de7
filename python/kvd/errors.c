// SPDX-License-Identifier: MIT
/*
 * kvd._kvd: errors: kvd.Error with the errno and kvd's reason.
 */
#include "kvd_py.h"

/* Raise kvd.Error(-@ret, "@what: @reason"); NULL for the caller. */
PyObject *raise_kv(int ret, const char *what, const char *reason)
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

/*
 * libkvclient's reason for @what's failure (kv_last_error()), without
 * the call's name it starts with: that is @what.
 */
static const char *last_reason(client_object *self, const char *what)
{
	const char *t = kv_last_error(self->c);
	size_t n = strlen(what);

	return !strncmp(t, what, n) && !strncmp(t + n, ": ", 2) ? t + n + 2 : t;
}

/* A failed request of @self: libkvclient's reason, or ours. */
PyObject *raise_call(client_object *self, int ret, const char *what)
{
	const char *reason = NULL;

	if (ret == -EDQUOT || ret == -ENOSPC)
		reason = last_reason(self, what);	/* which quota, say */
	else if (ret == -ECONNRESET)
		reason = "kvd went away (stopped, restarted, or ended this client): reconnect with a new Client";
	else if (ret == -EBUSY)
		reason = "an earlier call that timed out is still unanswered (kvd stopped or wedged): try again";
	if (ret == -ETIMEDOUT)
		self->maybe_orphan = 1;
	return raise_kv(ret, what, reason);
}

/* A kv_seq_* call failed: its reason (kv_last_error), noting a timeout. */
PyObject *raise_seq(client_object *self, int ret, const char *what)
{
	if (ret == -ETIMEDOUT)
		self->maybe_orphan = 1;
	if (ret == -EBUSY || ret == -ECONNRESET)
		return raise_call(self, ret, what);
	return raise_kv(ret, what, last_reason(self, what));
}
