// SPDX-License-Identifier: MIT
/*
 * Admin socket: kvctl sends one struct kv_admin_req and gets one reply
 * datagram (struct kv_admin_status followed by records), then kvd closes
 * the connection. Replies are built from the live books; nothing is cached.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "backend.h"
#include "client.h"
#include "daemon.h"
#include "loop.h"
#include "tenant.h"

#ifndef KV_VERSION
#define KV_VERSION "0.0"
#endif

/* KV_VERSION ("x.y.z") as KV_VERSION_CODE(). */
static uint32_t version_code(void)
{
	unsigned x = 0, y = 0, z = 0;

	sscanf(KV_VERSION, "%u.%u.%u", &x, &y, &z);
	return KV_VERSION_CODE(x & 0xffff, y & 0xff, z & 0xff);
}

void kvd_admin_fill_status(struct kvd *d, struct kv_admin_status *st)
{
	memset(st, 0, sizeof(*st));
	st->magic = KV_MAGIC;
	st->abi_major = KV_ABI_MAJOR;
	st->abi_minor = KV_ABI_MINOR;
	st->type = KV_MSG_ADMIN_REPLY;
	st->backend = d->be ? (uint32_t)d->be->backend : 0;
	st->export_kind = d->be ? (uint32_t)d->be->export_kind : 0;
	st->device = d->be && d->be->backend == KV_BACKEND_CUDA ?
		     d->cfg.device : -1;
	st->backed_bytes = d->backed_bytes;
	st->pid = (uint32_t)getpid();
	st->pool_bytes = d->pool.bytes;
	st->page_bytes = KV_PAGE_BYTES;
	st->nr_pages = d->pool.nr_pages;
	st->pages_used = d->pool.pages_used;
	st->pages_free = d->pool.nr_pages - d->pool.pages_used;
	st->peak_pages_used = d->pool.peak_pages_used;
	st->nr_clients = d->nr_clients;
	st->nr_namespaces = d->nr_ns;
	st->uptime_ms = (kvd_now_ns() - d->start_ns) / 1000000;
	st->ops = d->ops;
	st->reclaims = d->pool.reclaims;
	st->version = version_code();
}

/*
 * An admin command (admin_cmds[], by KV_ADMIN_*). Its handler fills
 * @recs, room for KV_ADMIN_MAX_RECORDS records, for @req: it returns how
 * many, or -errno for st->status.
 */
struct admin_cmd {
	uint32_t	cmd;		/* KV_ADMIN_* */
	const char	*name;
	size_t		rec;		/* bytes of one record */
	size_t		req;		/* bytes of its request */
	int		(*fill)(struct kvd *d, const struct kv_admin_req *req,
				struct kv_admin_status *st, void *recs);
};

static int fill_ns(struct kvd *d, const struct kv_admin_req *req,
		   struct kv_admin_status *st, void *buf)
{
	struct kv_admin_ns *r = buf;
	int n = 0;

	for (uint32_t i = 0; i < d->cfg.max_namespaces &&
	     n < KV_ADMIN_MAX_RECORDS; i++) {
		const struct kvd_ns *ns = &d->ns[i];

		if (!ns->live)
			continue;
		memset(&r[n], 0, sizeof(r[n]));
		r[n].id = ns->handle;
		r[n].nr_clients = ns->nr_clients;
		memcpy(r[n].model_id, ns->model_id, sizeof(r[n].model_id));
		memcpy(r[n].model_rev, ns->model_rev, sizeof(r[n].model_rev));
		r[n].tenant = ns->tenant;
		r[n].waste_ppm = kvd_ns_waste_ppm(ns);
		r[n].geom = ns->geom;
		r[n].block_bytes = ns->block_bytes;
		r[n].slab_bytes = ns->slab_bytes;
		r[n].slab_pages = ns->slab_pages;
		r[n].nr_slabs = ns->nr_slabs;
		r[n].blocks = ns->nr_blocks;
		r[n].blocks_used = ns->blocks_used;
		r[n].blocks_free = ns->nr_blocks - ns->blocks_used -
				   ns->cached_blocks;
		r[n].max_blocks = ns->max_blocks;
		r[n].pages = ns->acct.pages;
		r[n].min_pages = ns->acct.min_pages;
		r[n].max_pages = ns->acct.max_pages;
		r[n].cached_blocks = ns->cached_blocks;
		r[n].pinned_blocks = ns->pins.nr;
		kvd_ns_ctx(d, ns->tenant, ns->model_id, ns->geom.dtype,
			   &r[n].max_context, &r[n].ctx_refused,
			   &r[n].ctx_default);
		n++;
	}
	return n;
}

static void client_record(const struct kvd_client *c,
			  struct kv_admin_client *r)
{
	memset(r, 0, sizeof(*r));
	r->id = c->id;
	r->pid = (uint32_t)c->pid;
	r->uid = c->uid;
	r->gid = c->gid;
	r->ns_id = c->ns->handle;
	r->blocks = c->holder.nr_blocks;
	r->refs = c->holder.nr_refs;
	r->sq_entries = c->sq_entries;
	r->ops = c->ops;
}

static int fill_clients(struct kvd *d, const struct kv_admin_req *req,
			struct kv_admin_status *st, void *buf)
{
	struct kv_admin_client *r = buf;
	int n = 0;

	for (uint32_t i = 0; i < d->nr_slots && n < KV_ADMIN_MAX_RECORDS;
	     i++) {
		const struct kvd_client *c = &d->clients[i];

		if (c->state != KVD_CLIENT_LIVE)
			continue;
		client_record(c, &r[n++]);
	}
	return n;
}

/*
 * End live client arg[0] as if it had closed its socket: its blocks are
 * released now (a stopped or hung engine never would). One record: the
 * client as it was. No live client of that id: -ENOENT.
 */
static int fill_disconnect(struct kvd *d, const struct kv_admin_req *req,
			   struct kv_admin_status *st, void *buf)
{
	for (uint32_t i = 0; i < d->nr_slots; i++) {
		struct kvd_client *c = &d->clients[i];

		if (c->state != KVD_CLIENT_LIVE || c->id != req->arg[0])
			continue;
		char why[96];

		client_record(c, buf);
		snprintf(why, sizeof(why),
			 "by the administrator (kvctl disconnect), %u blocks released",
			 c->holder.nr_blocks);
		kvd_client_kill(d, c, why);
		st->nr_clients = d->nr_clients;
		st->pages_used = d->pool.pages_used;
		st->pages_free = d->pool.nr_pages - d->pool.pages_used;
		return 1;
	}
	return -ENOENT;
}

/* Prefix-cache books of each namespace; with @evict, drop the cached ones
 * of namespace @ns_id (~0: all) first. */
static int prefix_books(struct kvd *d, void *buf, bool evict, uint32_t ns_id)
{
	struct kv_admin_prefix *r = buf;
	int n = 0;

	for (uint32_t i = 0; i < d->cfg.max_namespaces &&
	     n < KV_ADMIN_MAX_RECORDS; i++) {
		struct kvd_ns *ns = &d->ns[i];

		if (!ns->live)
			continue;
		memset(&r[n], 0, sizeof(r[n]));
		if (evict && (ns_id == UINT32_MAX || ns_id == ns->handle))
			r[n].evicted_now = kvd_ns_evict_all(ns);
		r[n].ns_id = ns->handle;
		r[n].block_tokens = ns->geom.block_tokens;
		memcpy(r[n].model_id, ns->model_id, sizeof(r[n].model_id));
		r[n].lookups = ns->lookups;
		r[n].hit_blocks = ns->hit_blocks;
		r[n].hit_tokens = ns->hit_blocks * ns->geom.block_tokens;
		r[n].lookup_blocks = ns->lookup_blocks;
		r[n].lookup_tokens = ns->lookup_blocks * ns->geom.block_tokens;
		r[n].evictions = ns->evictions;
		r[n].cached_blocks = ns->cached_blocks;
		r[n].committed_blocks = ns->committed_blocks;
		r[n].blocks_used = ns->blocks_used;
		n++;
	}
	return n;
}

static int fill_prefix(struct kvd *d, const struct kv_admin_req *req,
		       struct kv_admin_status *st, void *buf)
{
	return prefix_books(d, buf, false, 0);
}

/* The live namespace numbered @handle (as kvctl shows it), or NULL. */
static struct kvd_ns *ns_by_handle(struct kvd *d, uint32_t handle)
{
	for (uint32_t i = 0; i < d->cfg.max_namespaces; i++)
		if (d->ns[i].live && d->ns[i].handle == handle)
			return &d->ns[i];
	return NULL;
}

/* arg[0]: the namespace, ~0 for all; one that is not live: -ENOENT. */
static int fill_evict(struct kvd *d, const struct kv_admin_req *req,
		      struct kv_admin_status *st, void *buf)
{
	uint32_t ns = req->arg[0];

	if (ns != UINT32_MAX && !ns_by_handle(d, ns))
		return -ENOENT;
	return prefix_books(d, buf, true, ns);
}

/* Verify every namespace's books (kvd_ns_check); one record each. */
static int fill_check(struct kvd *d, const struct kv_admin_req *req,
		      struct kv_admin_status *st, void *buf)
{
	struct kv_admin_check *r = buf;
	int n = 0;

	for (uint32_t i = 0; i < d->cfg.max_namespaces &&
	     n < KV_ADMIN_MAX_RECORDS; i++) {
		const char *why = "";

		if (!d->ns[i].live)
			continue;
		memset(&r[n], 0, sizeof(r[n]));
		r[n].ns_id = d->ns[i].handle;
		r[n].status = kvd_ns_check(&d->ns[i], &why);
		snprintf(r[n].why, sizeof(r[n].why), "%s", why);
		if (r[n].status)
			kvd_err("namespace %u: books broken: %s", r[n].ns_id, why);
		n++;
	}
	if ((d->host_tier.cap_bytes || d->disk_tier.cap_bytes) &&
	    n < KV_ADMIN_MAX_RECORDS) {
		const char *why = "";

		memset(&r[n], 0, sizeof(r[n]));
		r[n].ns_id = KV_ADMIN_CHECK_TIERS;
		r[n].status = kvd_tier_check(d, &why);
		snprintf(r[n].why, sizeof(r[n].why), "%s", why);
		if (r[n].status)
			kvd_err("tiers: books broken: %s", why);
		n++;
	}
	return n;
}

/* The tiers behind the pool: one record each (none when off). */
static uint32_t lat_us(const struct kvd_lat *l, uint32_t pct)
{
	uint64_t us = kvd_lat_pct(l, pct) / 1000;

	return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void tier_latencies(const struct kvd_disk *k, struct kv_admin_tier *r)
{
	r->read_p50_us = lat_us(&k->read_lat, 50);
	r->read_p99_us = lat_us(&k->read_lat, 99);
	r->write_p50_us = lat_us(&k->write_lat, 50);
	r->write_p99_us = lat_us(&k->write_lat, 99);
}

static int fill_tiers(struct kvd *d, const struct kv_admin_req *req,
		      struct kv_admin_status *st, void *buf)
{
	const struct kvd_tier *tiers[] = { &d->host_tier, &d->disk_tier };
	static const char *const names[] = { "host", "disk" };
	struct kv_admin_tier *r = buf;
	int n = 0;

	for (int i = 0; i < 2; i++) {
		const struct kvd_tier *t = tiers[i];

		if (!t->cap_bytes)
			continue;
		memset(&r[n], 0, sizeof(r[n]));
		snprintf(r[n].name, sizeof(r[n].name), "%s", names[i]);
		r[n].cap_bytes = t->cap_bytes;
		r[n].used_bytes = t->used_bytes;
		r[n].blocks = t->nr_entries;
		r[n].demotions = t->demotions;
		r[n].promotions = t->promotions;
		r[n].lookups = t->lookups;
		r[n].drops = t->drops + (t->disk ? t->disk->busy : 0);
		r[n].corrupt = t->corrupt;
		r[n].replaced = t->replaced;
		r[n].errors = t->disk ? t->disk->errors : 0;
		if (t->disk)
			tier_latencies(t->disk, &r[n]);
		n++;
	}
	return n;
}

static int fill_ops(struct kvd *d, const struct kv_admin_req *req,
		    struct kv_admin_status *st, void *buf)
{
	struct kv_admin_op *r = buf;

	for (uint32_t i = 0; i < KV_OP__MAX; i++) {
		const struct kvd_op_stat *s = &d->op_stats[i];

		memset(&r[i], 0, sizeof(r[i]));
		snprintf(r[i].name, sizeof(r[i].name), "%s", kvd_op_name(i));
		r[i].opcode = i;
		r[i].sample_shift = KVD_OP_SAMPLE_SHIFT;
		r[i].requests = s->requests;
		r[i].errors = s->errors;
		r[i].timed = s->timed;
		r[i].timed_ns = s->timed_ns;
		memcpy(r[i].bucket, s->bucket, sizeof(r[i].bucket));
	}
	return KV_OP__MAX;
}

static int fill_tenants(struct kvd *d, const struct kv_admin_req *req,
			struct kv_admin_status *st, void *buf)
{
	struct kv_admin_tenant *r = buf;
	int n = 0;

	for (uint32_t i = 0; i < KVD_MAX_TENANTS; i++) {
		const struct kvd_tenant *t = &d->tenants[i];

		if (!t->live)
			continue;
		memset(&r[n], 0, sizeof(r[n]));
		r[n].id = t->id;
		r[n].configured = t->configured;
		r[n].in_conf = t->configured ? t->in_conf : 1;
		r[n].uid = t->uid;
		memcpy(r[n].name, t->name, sizeof(r[n].name));
		r[n].nr_clients = t->nr_clients;
		r[n].pages = t->acct.pages;
		r[n].min_pages = t->acct.min_pages;
		r[n].max_pages = t->acct.max_pages;
		n++;
	}
	return n;
}

/* Re-read kvd.conf: one line of text, what was applied or why not. */
static int fill_reload(struct kvd *d, const struct kv_admin_req *req,
		       struct kv_admin_status *st, void *buf)
{
	struct kv_admin_msg *m = buf;

	st->status = kvd_reload(d, m->text, sizeof(m->text));
	return 1;
}

/* Namespace arg[0]'s prefix tree, arg[1] levels deep. */
static int fill_tree(struct kvd *d, const struct kv_admin_req *req,
		     struct kv_admin_status *st, void *buf)
{
	struct kvd_ns *ns = ns_by_handle(d, req->arg[0]);

	if (!ns)
		return -ENOENT;
	return kvd_prefix_tree(ns, buf, KV_ADMIN_MAX_RECORDS, req->arg[1]);
}

/*
 * PIN (arg[1] seconds) or UNPIN (arg[1] 0) the prefix ending at the
 * block of client hash pin.hash in namespace arg[0] (kvd/retain.c).
 * -ENOENT: no such namespace; -ENXIO: the hash is not in its pool.
 */
static bool is_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n--)
		if (*b++)
			return false;
	return true;
}

/* What is left of the pin of the block of @key: it may be longer than
 * the request's (pins never shorten). */
static uint64_t pin_left_ms(const struct kvd_ns *ns, const struct kv_hash *key)
{
	uint64_t end = kvd_ns_pin_expires(ns, key), now = kvd_now_ns();

	return end > now ? (end - now + 999999) / 1000000 : 0;
}

static int pin_fill(struct kvd *d, const struct kv_admin_req *req,
		    void *buf, bool pin)
{
	const struct kv_admin_pin_req *p = (const void *)req;
	struct kvd_ns *ns = ns_by_handle(d, req->arg[0]);
	uint64_t ttl_ms = (uint64_t)req->arg[1] * 1000;
	struct kv_admin_pin *r = buf;
	struct kv_hash key;
	int ret;

	if (!ns)
		return -ENOENT;
	if (pin ? !ttl_ms || ttl_ms > KV_PIN_MAX_MS : ttl_ms)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if (!pin && is_zero(&p->hash, sizeof(p->hash))) {	/* all */
		r->ns_id = ns->handle;
		r->changed = r->blocks = kvd_ns_pins_expire(ns, UINT64_MAX);
		kvd_info("admin: namespace %u (%s): every pin dropped (%u blocks)",
			 ns->handle, ns->model_id, r->changed);
		return 1;
	}
	key = kvd_ns_key(ns, &p->hash);
	ret = kvd_ns_pin_prefix(ns, &key, ttl_ms, kvd_now_ns(), &r->changed);
	if (ret < 0)
		return ret;
	r->ns_id = ns->handle;
	r->blocks = (uint32_t)ret;
	r->pinned = ns->pins.nr;
	r->ttl_ms = pin ? pin_left_ms(ns, &key) : 0;
	if (pin)
		kvd_info("admin: namespace %u (%s): a %u-block prefix pinned for %u s asked, %llu s left (%u blocks newly)",
			 ns->handle, ns->model_id, r->blocks, req->arg[1],
			 (unsigned long long)(r->ttl_ms / 1000), r->changed);
	else
		kvd_info("admin: namespace %u (%s): a %u-block prefix unpinned (%u blocks were pinned)",
			 ns->handle, ns->model_id, r->blocks, r->changed);
	return 1;
}

static int fill_pin(struct kvd *d, const struct kv_admin_req *req,
		    struct kv_admin_status *st, void *buf)
{
	return pin_fill(d, req, buf, true);
}

static int fill_unpin(struct kvd *d, const struct kv_admin_req *req,
		      struct kv_admin_status *st, void *buf)
{
	return pin_fill(d, req, buf, false);
}

#define CMDR(c, n, f, r, q)	[c] = { .cmd = c, .name = n, .fill = f, \
					.rec = sizeof(r), .req = sizeof(q) }
#define CMD(c, n, f, r)		CMDR(c, n, f, r, struct kv_admin_req)

static const struct admin_cmd admin_cmds[] = {
	CMD(KV_ADMIN_STATUS,	"status",	fill_ns,	struct kv_admin_ns),
	CMD(KV_ADMIN_CLIENTS,	"clients",	fill_clients,	struct kv_admin_client),
	CMD(KV_ADMIN_PREFIX,	"prefix",	fill_prefix,	struct kv_admin_prefix),
	CMD(KV_ADMIN_EVICT,	"evict",	fill_evict,	struct kv_admin_prefix),
	CMD(KV_ADMIN_TREE,	"tree",		fill_tree,	struct kv_admin_tree_node),
	CMD(KV_ADMIN_CHECK,	"check",	fill_check,	struct kv_admin_check),
	CMD(KV_ADMIN_RELOAD,	"reload",	fill_reload,	struct kv_admin_msg),
	CMD(KV_ADMIN_TENANTS,	"tenants",	fill_tenants,	struct kv_admin_tenant),
	CMD(KV_ADMIN_DISCONNECT, "disconnect",	fill_disconnect, struct kv_admin_client),
	CMD(KV_ADMIN_TIERS,	"tiers",	fill_tiers,	struct kv_admin_tier),
	CMDR(KV_ADMIN_PIN,	"pin",		fill_pin,	struct kv_admin_pin,
	     struct kv_admin_pin_req),
	CMDR(KV_ADMIN_UNPIN,	"unpin",	fill_unpin,	struct kv_admin_pin,
	     struct kv_admin_pin_req),
	CMD(KV_ADMIN_OPS,	"ops",		fill_ops,	struct kv_admin_op),
};

/* The command of a well-formed request, or NULL with st->status set. */
static const struct admin_cmd *admin_cmd(const struct kvd_admin_conn *a,
					 int len, struct kv_admin_status *st)
{
	const struct kv_admin_req *req = &a->req;

	if (len < (int)sizeof(*req) || req->magic != KV_MAGIC ||
	    req->type != KV_MSG_ADMIN || req->abi_major != KV_ABI_MAJOR) {
		st->status = -EPROTO;
		return NULL;
	}
	if (req->cmd >= ARRAY_SIZE(admin_cmds) || !admin_cmds[req->cmd].fill) {
		st->status = -EOPNOTSUPP;
		return NULL;
	}
	if (len != (int)admin_cmds[req->cmd].req) {
		st->status = -EPROTO;
		return NULL;
	}
	return &admin_cmds[req->cmd];
}

/*
 * A client library's HELLO, sent here by mistake: refuse it in the
 * WELCOME it waits for, so its error says where to go instead of
 * "Protocol error".
 */
static bool reply_hello(struct kvd_admin_conn *a, int len)
{
	struct kv_welcome w = {
		.magic = KV_MAGIC, .abi_major = KV_ABI_MAJOR,
		.abi_minor = KV_ABI_MINOR, .type = KV_MSG_WELCOME,
		.size = sizeof(w), .status = -EPROTO, .device = -1,
	};

	if (len < 16 || a->req.magic != KV_MAGIC ||
	    a->req.type != KV_MSG_HELLO)
		return false;
	snprintf(w.errmsg, sizeof(w.errmsg),
		 "this is kvd's admin socket, for kvctl: connect clients to kvd's client socket (kvd --socket)");
	if (send(a->fd, &w, sizeof(w), MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		kvd_dbg("admin: refusing a HELLO: %m");
	return true;
}

static void reply(struct kvd *d, struct kvd_admin_conn *a, int len)
{
	const struct admin_cmd *cmd;
	struct kv_admin_status *st;
	size_t n = 0;
	uint8_t *buf;
	int ret;

	if (reply_hello(a, len))
		return;
	buf = calloc(1, KV_ADMIN_REPLY_MAX);
	if (!buf)
		return;
	st = (struct kv_admin_status *)buf;
	kvd_admin_fill_status(d, st);
	cmd = admin_cmd(a, len, st);
	if (cmd) {
		ret = cmd->fill(d, &a->req, st, buf + sizeof(*st));
		if (ret < 0)
			st->status = ret;
		else
			n = (size_t)ret;
	}
	st->nr_records = (uint32_t)n;
	if (send(a->fd, buf, sizeof(*st) + n * (cmd ? cmd->rec : 0),
		 MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		kvd_dbg("admin %s reply: %m", cmd ? cmd->name : "bad");
	free(buf);
}

/*
 * The admin socket's mode already keeps others out; check the peer too:
 * root, kvd's own uid, or a member of the admin group.
 */
static bool admin_allowed(struct kvd *d, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	gid_t g[64];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return false;
	if (cr.uid == 0 || cr.uid == geteuid())
		return true;
	if (!d->conf.has_admin_group)
		return false;
	if (cr.gid == d->conf.admin_gid)
		return true;
	len = sizeof(g);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len))
		return false;
	for (uint32_t i = 0; i < len / sizeof(g[0]); i++)
		if (g[i] == d->conf.admin_gid)
			return true;
	return false;
}

void kvd_admin_accept(struct kvd *d, int fd)
{
	uint32_t i;
	int err;

	if (!admin_allowed(d, fd)) {
		if (kvd_ratelimit(&d->rl_kill))
			kvd_warn("admin: refused a peer that is not root, kvd's user or in the admin group");
		close(fd);
		return;
	}

	for (i = 0; i < KVD_MAX_ADMIN; i++)
		if (d->adm[i].fd < 0)
			break;
	if (i == KVD_MAX_ADMIN) {
		if (kvd_ratelimit(&d->rl_full))
			kvd_warn("admin: too many connections, refusing one");
		close(fd);
		return;
	}
	/* The reply is one datagram: make room for the largest. */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){ 2 * KV_ADMIN_REPLY_MAX },
		   sizeof(int));
	d->adm[i].fd = fd;
	d->adm[i].gen++;
	d->adm[i].t_accept_ns = kvd_now_ns();
	err = kvd_loop_arm_admin(d, i);
	if (err) {
		kvd_warn("admin: cannot watch a connection: %s", strerror(-err));
		close(fd);
		d->adm[i].fd = -1;
	}
}

void kvd_admin_recv_done(struct kvd *d, uint32_t slot, int res)
{
	struct kvd_admin_conn *a;

	if (slot >= KVD_MAX_ADMIN || d->adm[slot].fd < 0)
		return;
	a = &d->adm[slot];
	if (res > 0)
		reply(d, a, res);
	close(a->fd);
	a->fd = -1;
}

/*
 * Periodic: a connection silent for 1 s is shut down; its recv ends. Not
 * on a late tick (d->tick_stall_ns): its request may wait in this batch.
 */
void kvd_admin_tick(struct kvd *d)
{
	uint64_t now = kvd_now_ns();

	for (uint32_t i = 0; i < KVD_MAX_ADMIN; i++) {
		struct kvd_admin_conn *a = &d->adm[i];

		if (a->fd < 0)
			continue;
		if (d->tick_stall_ns)
			a->t_accept_ns += d->tick_stall_ns;
		else if (now - a->t_accept_ns > 1000000000ULL)
			shutdown(a->fd, SHUT_RDWR);
	}
}
