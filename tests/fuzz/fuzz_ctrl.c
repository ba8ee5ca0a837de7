// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the control messages a peer can send kvd, on a
 * daemon state with two tenants (from a kvd.conf), two namespaces (the
 * first with a chain of committed blocks, partly cached) and two live
 * clients. An input is a mode byte and a message:
 *
 *   bit 0 clear: a HELLO datagram. kvd_hello_check() must refuse it with
 *     a reason, or accept it; an accepted one is admitted as hello()
 *     would (tenant by peer credentials, bits 1-2; namespace; ring) and
 *     must then be served: a namespace and ring created, an ALLOC
 *     answered, the books sound.
 *   bit 0 set: an admin request: a length byte, that many bytes of
 *     datagram, handed to kvd_admin_recv_done() on one end of a
 *     socketpair (bit 1: the recv failed instead). With bit 2 the rest
 *     of the input is kvd.conf for KV_ADMIN_RELOAD. The reply must be
 *     one well-formed datagram; the books sound afterwards.
 *
 * The whole HELLO path (kvd_client_ctrl_done) is not driven: it needs
 * the event loop's io_uring. Every input starts from the same state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "fuzz.h"
#include "opdef.h"
#include "ring.h"
#include "tenant.h"

#define POOL_PAGES	16
#define NR_NS		4
#define NR_SLOTS	4
#define OTHER_GID	4242	/* tenant b's group */

static struct kvd d;
static struct kvd_tenant tenants0[KVD_MAX_TENANTS];
static const char *base_path;
static char base_conf[512];

static const struct kv_geometry geom_a = {
	.layers = 4, .kv_heads = 2, .head_dim = 64, .block_tokens = 16,
	.dtype = KV_DTYPE_FP16,
};
/* 65 KiB blocks (scales after each layer): slabs of plain pages */
static const struct kv_geometry geom_b = {
	.layers = 4, .kv_heads = 2, .head_dim = 256, .block_tokens = 16,
	.dtype = KV_DTYPE_INT8, .quant = KV_QUANT_TOKEN,
};

static int no_copy(struct kvd *dd, const struct kvd_copy *v, uint32_t n)
{
	(void)dd, (void)v, (void)n;
	return 0;
}

static const struct kvd_backend fuzz_backend = {
	.name		= "fuzz",
	.backend	= KV_BACKEND_HOST,
	.export_kind	= KV_EXPORT_MEMFD,
	.copy		= no_copy,
};

static void load_conf(const char *path)
{
	char err[256];

	if (kvd_conf_load(path, &d.conf, err, sizeof(err)))
		FUZZ_BUG("base kvd.conf: %s", err);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	snprintf(base_conf, sizeof(base_conf),
		 "max_clients = 2\n"
		 "[tenant a]\nuids = %u\nsecret = fuzz-secret-of-tenant-a\n"
		 "[tenant b]\ngids = %u\n"
		 "secret = hex:00112233445566778899aabbccddeeff\n"
		 "max_pages = 8\n"
		 "[namespace a/m0]\nmax_pages = 6\n",
		 (unsigned)getuid(), OTHER_GID);
	/* slot 0: the base file; slot 1: what a RELOAD reads */
	base_path = strdup(fuzz_memfd_path(0, base_conf, strlen(base_conf)));
	d.be = &fuzz_backend;
	d.cfg.max_namespaces = NR_NS;
	d.cfg.max_clients = 2;
	d.ns = calloc(NR_NS, sizeof(*d.ns));
	d.nr_slots = NR_SLOTS;
	d.clients = calloc(NR_SLOTS, sizeof(*d.clients));
	d.live = calloc(NR_SLOTS, sizeof(*d.live));
	d.scratch = malloc(KV_MAX_DATA_BYTES);
	if (!base_path || !d.ns || !d.clients || !d.live || !d.scratch)
		abort();
	for (unsigned i = 0; i < KVD_MAX_ADMIN; i++)
		d.adm[i].fd = -1;
	load_conf(base_path);
	kvd_tenants_apply(&d);
	if (!d.tenants[0].live || !d.tenants[1].live)
		FUZZ_BUG("tenants a and b not applied");
	memcpy(tenants0, d.tenants, sizeof(tenants0));
	return 0;
}

static void ns_up(unsigned i, const char *model, const char *rev,
		  const struct kv_geometry *g, unsigned tenant)
{
	struct kvd_ns *ns = &d.ns[i];

	if (kvd_ns_init(ns, &d.pool, i, model, rev, g, tenant,
			&d.tenants[tenant].key))
		FUZZ_BUG("namespace %s: init failed", model);
	ns->tacct = &d.tenants[tenant].acct;
	d.nr_ns++;
}

static void client_up(unsigned i, unsigned ns, unsigned tenant)
{
	struct kvd_client *c = &d.clients[i];

	memset(c, 0, sizeof(*c));
	c->slot = i;
	c->id = i + 1;
	c->state = KVD_CLIENT_LIVE;
	c->ring_fd = c->sq_evfd = c->cq_evfd = c->sock = -1;
	c->pid = 1000 + (pid_t)i;
	c->uid = tenant ? 4000 : getuid();
	c->gid = tenant ? OTHER_GID : getgid();
	c->tenant = (int)tenant;
	c->sq_entries = 64;
	c->ns = &d.ns[ns];
	c->ns->nr_clients++;
	kvd_holder_init(&c->holder, i);
	d.nr_clients++;
	d.tenants[tenant].nr_clients++;
}

/* Client 0 commits a chain of 8 blocks and keeps the first 4. */
static void populate(void)
{
	struct kvd_client *c = &d.clients[0];
	struct kv_commit e[8] = { 0 };
	uint32_t ids[8];

	if (kvd_ns_alloc(c->ns, &c->holder, ids, 8) != 8)
		FUZZ_BUG("populate: ALLOC failed");
	for (unsigned k = 0; k < 8; k++) {
		e[k].id = ids[k];
		e[k].hash.b[0] = (uint8_t)(k + 1);
		e[k].parent.b[0] = (uint8_t)k;
	}
	if (kvd_ns_commit(c->ns, &c->holder, e, 8) != 8 ||
	    kvd_ns_release(c->ns, &c->holder, ids + 4, 4) != 4)
		FUZZ_BUG("populate: COMMIT or RELEASE failed");
	c = &d.clients[1];
	if (kvd_ns_alloc(c->ns, &c->holder, ids, 3) != 3)
		FUZZ_BUG("populate: ALLOC in ns 1 failed");
}

static void setup(void)
{
	memcpy(d.tenants, tenants0, sizeof(d.tenants));
	kvd_conf_free(&d.conf);
	load_conf(base_path);
	d.conf_path = NULL;
	if (kvd_pool_init(&d.pool, POOL_PAGES))
		abort();
	d.pool.ns = d.ns;
	d.pool.nr_ns = NR_NS;
	ns_up(0, "m0", "", &geom_a, 0);
	ns_up(1, "m1", "r2", &geom_b, 1);
	client_up(0, 0, 0);
	client_up(1, 1, 1);
	populate();
	d.start_ns = kvd_now_ns();
}

static void check_books(const char *when)
{
	for (unsigned i = 0; i < NR_NS; i++) {
		const char *why = "?";

		if (d.ns[i].live && kvd_ns_check(&d.ns[i], &why))
			FUZZ_BUG("namespace %u %s: %s", i, when, why);
	}
}

static void teardown(void)
{
	for (unsigned i = 0; i < NR_SLOTS; i++) {
		struct kvd_client *c = &d.clients[i];

		if (c->state == KVD_CLIENT_LIVE)
			kvd_ns_release_all(c->ns, &c->holder);
		c->state = KVD_CLIENT_FREE;
	}
	for (unsigned i = 0; i < NR_NS; i++)
		if (d.ns[i].live)
			kvd_ns_exit(&d.ns[i]);
	kvd_pool_exit(&d.pool);
	d.nr_ns = 0;
	d.nr_clients = 0;
}

/* ---- HELLO ---- */

/* The namespace hello() would give: an equal one, else a new one. */
static struct kvd_ns *ns_for(const struct kv_hello *h, unsigned tenant,
			     bool *fresh)
{
	struct kvd_ns *free_ns = NULL;
	int ret;

	*fresh = false;
	for (unsigned i = 0; i < NR_NS; i++) {
		if (kvd_ns_match(&d.ns[i], h->model_id, h->model_rev, &h->geom,
				 tenant))
			return &d.ns[i];
		if (!d.ns[i].live && !free_ns)
			free_ns = &d.ns[i];
	}
	if (!free_ns)
		FUZZ_BUG("no free namespace slot");
	ret = kvd_ns_init(free_ns, &d.pool, (uint32_t)(free_ns - d.ns),
			  h->model_id, h->model_rev, &h->geom, tenant,
			  &d.tenants[tenant].key);
	if (ret == -ENOMEM)
		return NULL;
	if (ret)
		FUZZ_BUG("HELLO passed the check, kvd_ns_init: %d", ret);
	free_ns->tacct = &d.tenants[tenant].acct;
	*fresh = true;
	return free_ns;
}

/* Serve the new client a STATS and an ALLOC through the opcode table. */
static void first_requests(struct kvd_client *c)
{
	struct kv_sqe sqe = { .opcode = KV_OP_STATS,
			      .nr = sizeof(struct kv_stats) };
	int ret = kvd_op_issue(&d, c, &sqe);

	if (ret != (int)sizeof(struct kv_stats))
		FUZZ_BUG("STATS on a new client: %d", ret);
	sqe.opcode = KV_OP_ALLOC;
	sqe.nr = 1;
	ret = kvd_op_issue(&d, c, &sqe);
	if (ret != 1 && ret != -ENOSPC && ret != -EDQUOT)
		FUZZ_BUG("ALLOC 1 on a new client: %d", ret);
}

static void admit(uint8_t mode, const struct kv_hello *h)
{
	static const uint32_t groups[] = { OTHER_GID };
	unsigned peer = mode >> 1 & 3;
	uint32_t uid = peer ? 4000 + peer : getuid();
	uint32_t gid = peer == 1 ? OTHER_GID : uid;
	struct kvd_client *c = &d.clients[2];
	const char *why = NULL;
	struct kvd_ns *ns;
	bool fresh;
	int t, ret;

	t = kvd_tenant_of(&d, uid, gid, groups, peer == 2, &why);
	if (peer == 3) {
		if (t != -EACCES || !why)
			FUZZ_BUG("a peer in no tenant got %d", t);
		return;
	}
	if (t != (peer ? 1 : 0))
		FUZZ_BUG("peer %u: tenant %d", peer, t);
	ns = ns_for(h, (unsigned)t, &fresh);
	if (!ns)
		return;
	memset(c, 0, sizeof(*c));
	c->slot = 2;
	c->ring_fd = c->cq_evfd = c->sq_evfd = c->sock = -1;
	c->state = KVD_CLIENT_LIVE;
	c->ns = ns;
	kvd_holder_init(&c->holder, 2);
	ret = kvd_ring_setup(c, h->sq_entries, h->data_bytes);
	if (ret == -ENOMEM || ret == -EMFILE)
		goto out;
	if (ret)
		FUZZ_BUG("HELLO passed the check, kvd_ring_setup: %d", ret);
	if (c->off.sq_entries != h->sq_entries ||
	    c->off.data_bytes != h->data_bytes ||
	    c->off.ring_bytes != c->off.data + h->data_bytes)
		FUZZ_BUG("ring layout does not match the HELLO");
	first_requests(c);
	if (getenv("KVD_FUZZ_TRACE"))
		fprintf(stderr, "HELLO admitted: tenant %d, ns %u%s, %llu-byte blocks\n",
			t, ns->id, fresh ? " (new)" : "",
			(unsigned long long)ns->block_bytes);
	check_books("after a new client's first requests");
	kvd_ns_release_all(ns, &c->holder);
	kvd_ring_teardown(c);
out:
	c->state = KVD_CLIENT_FREE;
	if (fresh)
		kvd_ns_exit(ns);
}

static void do_hello(uint8_t mode, struct fuzz_in *in)
{
	union {
		struct kv_hello	h;
		uint8_t		raw[sizeof(struct kv_hello) + 8];
	} *rx = malloc(sizeof(*rx));
	const char *why = NULL;
	size_t n = in->n;
	int len, ret;

	if (!rx)
		abort();
	fuzz_bytes(in, rx->raw, sizeof(rx->raw));
	/* a datagram longer than the buffer comes back MSG_TRUNC: -1 */
	len = n > sizeof(rx->raw) ? -1 : (int)n;
	ret = kvd_hello_check(&d, &rx->h, len, &why);
	if (ret) {
		if (!why || !*why)
			FUZZ_BUG("HELLO refused (%d) without a reason", ret);
		if (ret != -EPROTO && ret != -EINVAL && ret != -E2BIG)
			FUZZ_BUG("HELLO refused with %d", ret);
	} else {
		if (len != (int)sizeof(struct kv_hello))
			FUZZ_BUG("a HELLO of %d bytes passed", len);
		admit(mode, &rx->h);
	}
	free(rx);
}

/* ---- admin ---- */

static size_t record_bytes(uint32_t cmd)
{
	switch (cmd) {
	case KV_ADMIN_STATUS:
		return sizeof(struct kv_admin_ns);
	case KV_ADMIN_CLIENTS:
	case KV_ADMIN_DISCONNECT:
		return sizeof(struct kv_admin_client);
	case KV_ADMIN_PREFIX:
	case KV_ADMIN_EVICT:
		return sizeof(struct kv_admin_prefix);
	case KV_ADMIN_TREE:
		return sizeof(struct kv_admin_tree_node);
	case KV_ADMIN_CHECK:
		return sizeof(struct kv_admin_check);
	case KV_ADMIN_RELOAD:
		return sizeof(struct kv_admin_msg);
	case KV_ADMIN_TENANTS:
		return sizeof(struct kv_admin_tenant);
	case KV_ADMIN_TIERS:
		return sizeof(struct kv_admin_tier);
	}
	return 0;
}

static void check_reply(const struct kv_admin_req *req, const uint8_t *buf,
			ssize_t n)
{
	const struct kv_admin_status *st = (const void *)buf;
	size_t rec = record_bytes(req->cmd);
	bool absent;

	if (n == sizeof(struct kv_welcome) &&
	    ((const struct kv_welcome *)buf)->type == KV_MSG_WELCOME) {
		const struct kv_welcome *w = (const void *)buf;

		/* only a client's HELLO at the admin socket: refused, why */
		if (req->magic != KV_MAGIC || req->type != KV_MSG_HELLO ||
		    w->status != -EPROTO || !w->errmsg[0])
			FUZZ_BUG("a WELCOME from the admin socket");
		return;
	}
	if (n < (ssize_t)sizeof(*st))
		FUZZ_BUG("admin reply of %zd bytes", n);
	if (st->magic != KV_MAGIC || st->type != KV_MSG_ADMIN_REPLY)
		FUZZ_BUG("admin reply header");
	/* EVICT of a namespace, DISCONNECT of a client, that is not there */
	absent = st->status == -ENOENT && (req->cmd == KV_ADMIN_EVICT ||
					   req->cmd == KV_ADMIN_DISCONNECT);
	if (st->status && st->status != -EOPNOTSUPP && st->status != -EPROTO &&
	    !absent && req->cmd != KV_ADMIN_RELOAD && req->cmd != KV_ADMIN_TREE)
		FUZZ_BUG("admin cmd %u: status %d", req->cmd, st->status);
	if (st->status && req->cmd != KV_ADMIN_RELOAD && st->nr_records)
		FUZZ_BUG("admin: %u records with status %d", st->nr_records,
			 st->status);
	if ((size_t)n != sizeof(*st) + st->nr_records * rec)
		FUZZ_BUG("admin cmd %u: %zd bytes for %u records of %zu",
			 req->cmd, n, st->nr_records, rec);
	if (req->cmd == KV_ADMIN_RELOAD && st->nr_records == 1) {
		const struct kv_admin_msg *m = (const void *)(st + 1);

		if (!memchr(m->text, 0, sizeof(m->text)))
			FUZZ_BUG("RELOAD message not NUL-terminated");
	}
}

static void do_admin(uint8_t mode, struct fuzz_in *in)
{
	struct kvd_admin_conn *a = &d.adm[0];
	size_t want = fuzz_u8(in), got;
	uint8_t *buf;
	ssize_t n;
	int sv[2], res;

	/* recv() fills req and spills into pad, as kvd_admin_accept asks */
	memset(&a->req, 0, sizeof(a->req) + sizeof(a->pad));
	if (want > sizeof(a->req) + sizeof(a->pad))
		want = sizeof(a->req) + sizeof(a->pad);
	got = fuzz_bytes(in, &a->req, want);
	res = mode & 2 ? -ECONNRESET : (int)got;
	if (mode & 4) {
		d.conf_path = (char *)fuzz_memfd_path(1, in->p, in->n);
		if (!d.conf_path)
			abort();
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		abort();
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF,
		   &(int){ 2 * KV_ADMIN_REPLY_MAX }, sizeof(int));
	a->fd = sv[0];
	kvd_admin_recv_done(&d, 0, res);
	if (a->fd != -1)
		FUZZ_BUG("admin connection left open");
	buf = malloc(KV_ADMIN_REPLY_MAX + 1);
	if (!buf)
		abort();
	n = recv(sv[1], buf, KV_ADMIN_REPLY_MAX + 1, MSG_DONTWAIT);
	if (res > 0)
		check_reply(&a->req, buf, n);
	else if (n > 0)
		FUZZ_BUG("admin reply to a failed recv");
	free(buf);
	close(sv[1]);
	d.conf_path = NULL;
	check_books("after an admin request");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t mode = fuzz_u8(&in);

	setup();
	if (mode & 1)
		do_admin(mode, &in);
	else
		do_hello(mode, &in);
	teardown();
	return 0;
}
