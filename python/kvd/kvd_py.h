/* SPDX-License-Identifier: MIT */
/*
 * kvd._kvd, the CPython binding of libkvclient: what its files share.
 * (module.c the module; client.c, requests.c, seq.c and views.c the
 * types; ring.c a Client's lock and requests in flight; args.c and
 * errors.c the conversions both ways.) The rules of every method are
 * those of kvd-python(7):
 *  - A call that can wait for kvd releases the GIL while it waits; a
 *    Client serialises its own calls with a lock of its own.
 *  - Errors raise kvd.Error (an OSError): the errno libkvclient returned
 *    and the call's and kvd's reason (kv_connect's errbuf,
 *    kv_last_error()).
 *  - A Client belongs to the process that made it: in a child forked
 *    since, its calls raise EPERM and closing it only forgets it.
 *  - Block memory views are the pool mapping; while one lives, close()
 *    refuses (EBUSY) and the mapping stays.
 */
#ifndef KVD_PY_H
#define KVD_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <kv/kv.h>

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
	int			retained;	/* retain() set one: close()
						 * raises its failure */
};

/* A view of [addr, addr + len) of a client's pool mapping. */
typedef struct {
	PyObject_HEAD
	client_object		*client;	/* a reference */
	char			*addr;
	Py_ssize_t		len;
} view_object;

extern PyObject *kvd_error;		/* kvd.Error(OSError) */
extern PyTypeObject client_type, seq_type, hostmem_type, cudamem_type;

#define DOC(name, text)	PyDoc_STRVAR(name##_doc, text)

/* errors.c */
PyObject *raise_kv(int ret, const char *what, const char *reason);
PyObject *raise_call(client_object *self, int ret, const char *what);
PyObject *raise_seq(client_object *self, int ret, const char *what);

/* args.c */
int u32_from(PyObject *o, uint32_t *out, const char *what);
int conv_u32(PyObject *o, void *out);
uint32_t *u32_array(PyObject *seq, const char *what, Py_ssize_t *nr);
int hash_from(PyObject *o, struct kv_hash *h, const char *what);
struct kv_hash *hash_array(PyObject *o, const char *what,
			   Py_ssize_t *nr);
PyObject *id_list(const kv_block_t *ids, Py_ssize_t nr);
PyObject *hash_bytes(const struct kv_hash *h);
int name_index(const char *const *names, const char *name,
	       const char *what);
extern const char *const dtype_names[];
extern const char *const quant_names[];
extern const char *const hash_names[];

/* ring.c */
void client_lock(client_object *self);
int reap_deferred(client_object *self, int wait);
void close_zombies(client_object *self);
int forked(client_object *self);
int client_enter(client_object *self);
int client_enter_ring(client_object *self, int shared);
void client_leave(client_object *self);
int defer_submit(client_object *self, size_t bytes, const char *what);
struct kv_sqe *defer_sqe(client_object *self, const void *data,
			 Py_ssize_t nr, size_t elem, uint32_t *off,
			 const char *what);

/* client.c */
int client_close_locked(client_object *self);

/* requests.c */
PyObject *client_alloc(client_object *self, PyObject *args, PyObject *kw);
PyObject *client_release(client_object *self, PyObject *args,
			 PyObject *kw);
PyObject *client_flush(client_object *self, PyObject *unused);
PyObject *client_get_deferred(client_object *self, void *unused);
PyObject *client_ref(client_object *self, PyObject *arg);
PyObject *client_cow(client_object *self, PyObject *arg);
PyObject *client_lookup(client_object *self, PyObject *arg);
PyObject *client_alloc_prefix(client_object *self, PyObject *args);
PyObject *client_commit(client_object *self, PyObject *args,
			PyObject *kw);
PyObject *client_stats(client_object *self, PyObject *unused);
PyObject *client_nop(client_object *self, PyObject *unused);
PyObject *client_heartbeat(client_object *self, PyObject *unused);

/* seq.c */
void seq_close_now(client_object *self, struct kv_seq *s);
void seq_drop(seq_object *so);
PyObject *client_seq_open(client_object *self, PyObject *args, PyObject *kw);
PyObject *client_seq_open_hashes(client_object *self, PyObject *args,
				 PyObject *kw);

/* views.c */
PyObject *view_new(client_object *self, char *addr, Py_ssize_t len);

#endif /* KVD_PY_H */
