// SPDX-License-Identifier: MIT
/*
 * kvctl: kvd's admin command. Sends one request on the admin socket and
 * renders the reply as a table or, with --json, as JSON (one emitter).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <kv/abi.h>

#include "emit.h"

#define ARRAY_LEN(a)	((int)(sizeof(a) / sizeof((a)[0])))
#define REPLY_MAX	KV_ADMIN_REPLY_MAX

static const char *dtype_name(uint32_t d)
{
	static const char *const names[] = {
		[KV_DTYPE_FP16] = "fp16", [KV_DTYPE_BF16] = "bf16",
		[KV_DTYPE_FP32] = "fp32", [KV_DTYPE_FP8_E4M3] = "fp8_e4m3",
		[KV_DTYPE_INT8] = "int8",
	};

	return d < KV_DTYPE__MAX ? names[d] : "?";
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvctl [-a|--admin-socket PATH] [--json] COMMAND\n"
"commands:\n"
"  status    pool, pages and per-namespace blocks\n"
"  clients   connected clients and the blocks they hold\n"
"The admin socket defaults to $KVD_ADMIN_SOCKET, else /run/kvd/kvd-admin.sock\n"
"as root and $XDG_RUNTIME_DIR/kvd-admin.sock otherwise.\n");
}

static int admin_path(const char *opt, char *buf, size_t len)
{
	const char *e = getenv("KVD_ADMIN_SOCKET"), *xdg;
	int n;

	if (opt)
		n = snprintf(buf, len, "%s", opt);
	else if (e && *e)
		n = snprintf(buf, len, "%s", e);
	else if (geteuid() == 0 || !(xdg = getenv("XDG_RUNTIME_DIR")) || !*xdg)
		n = snprintf(buf, len, "/run/kvd/kvd-admin.sock");
	else
		n = snprintf(buf, len, "%s/kvd-admin.sock", xdg);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* One request, one reply datagram. Returns reply bytes or -errno. */
static ssize_t admin_call(const char *path, uint32_t cmd, void *buf)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kv_admin_req req = {
		.magic = KV_MAGIC, .abi_major = KV_ABI_MAJOR,
		.abi_minor = KV_ABI_MINOR, .type = KV_MSG_ADMIN, .cmd = cmd,
	};
	struct timeval tv = { .tv_sec = 5 };
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A kvd that accepts but never answers must not hang us. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, &req, sizeof(req), MSG_NOSIGNAL) != sizeof(req)) {
		n = -errno;
		goto out;
	}
	n = recv(fd, buf, REPLY_MAX, 0);
	if (n < 0)
		n = errno == EAGAIN ? -ETIMEDOUT : -errno;
	else if (n == 0)
		n = -ECONNRESET;
out:
	close(fd);
	return n;
}

static void emit_pool(struct kv_emit *e, const struct kv_admin_status *st)
{
	kv_emit_obj_begin(e, "pool", "pool");
	kv_emit_str(e, "backend", "backend",
		    st->backend == KV_BACKEND_CUDA ? "cuda" : "host");
	kv_emit_u64(e, "bytes", "bytes", st->pool_bytes);
	kv_emit_u64(e, "page_bytes", "page bytes", st->page_bytes);
	kv_emit_u64(e, "pages", "pages", st->nr_pages);
	kv_emit_u64(e, "pages_used", "pages used", st->pages_used);
	kv_emit_u64(e, "pages_free", "pages free", st->pages_free);
	kv_emit_u64(e, "peak_pages_used", "peak pages used",
		    st->peak_pages_used);
	kv_emit_obj_end(e);
	kv_emit_u64(e, "pid", "kvd pid", st->pid);
	kv_emit_u64(e, "uptime_ms", "uptime ms", st->uptime_ms);
	kv_emit_u64(e, "nr_clients", "clients", st->nr_clients);
	kv_emit_u64(e, "nr_namespaces", "namespaces", st->nr_namespaces);
	kv_emit_u64(e, "ops", "ops served", st->ops);
}

static const struct kv_emit_col ns_cols[] = {
	{ "id", "NS", 3 }, { "model", "MODEL", -20 },
	{ "layers", "LAYERS", 6 }, { "kv_heads", "KVH", 4 },
	{ "head_dim", "HDIM", 5 }, { "block_tokens", "TOK", 4 },
	{ "dtype", "DTYPE", 8 }, { "block_bytes", "BLOCK_B", 9 },
	{ "slab_pages", "SLAB_PG", 7 }, { "slabs", "SLABS", 6 },
	{ "blocks", "BLOCKS", 7 }, { "blocks_used", "USED", 7 },
	{ "blocks_free", "FREE", 7 }, { "max_blocks", "MAX", 8 },
	{ "clients", "CLIENTS", 7 },
};

static void emit_status(struct kv_emit *e, const struct kv_admin_status *st,
			const struct kv_admin_ns *ns)
{
	emit_pool(e, st);
	kv_emit_table_begin(e, "namespaces", ns_cols, ARRAY_LEN(ns_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		char model[KV_MODEL_ID_MAX];

		memcpy(model, ns[i].model_id, sizeof(model));
		model[sizeof(model) - 1] = 0;
		for (char *p = model; *p; p++)	/* kvd checks; be safe anyway */
			if (*p < 0x21 || *p > 0x7e)
				*p = '?';
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, ns[i].id);
		kv_emit_cell_str(e, model);
		kv_emit_cell_u64(e, ns[i].geom.layers);
		kv_emit_cell_u64(e, ns[i].geom.kv_heads);
		kv_emit_cell_u64(e, ns[i].geom.head_dim);
		kv_emit_cell_u64(e, ns[i].geom.block_tokens);
		kv_emit_cell_str(e, dtype_name(ns[i].geom.dtype));
		kv_emit_cell_u64(e, ns[i].block_bytes);
		kv_emit_cell_u64(e, ns[i].slab_pages);
		kv_emit_cell_u64(e, ns[i].nr_slabs);
		kv_emit_cell_u64(e, ns[i].blocks);
		kv_emit_cell_u64(e, ns[i].blocks_used);
		kv_emit_cell_u64(e, ns[i].blocks_free);
		kv_emit_cell_u64(e, ns[i].max_blocks);
		kv_emit_cell_u64(e, ns[i].nr_clients);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static const struct kv_emit_col client_cols[] = {
	{ "id", "ID", 5 }, { "pid", "PID", 8 }, { "uid", "UID", 6 },
	{ "gid", "GID", 6 }, { "ns", "NS", 3 }, { "blocks", "BLOCKS", 8 },
	{ "refs", "REFS", 8 }, { "sq_entries", "SQ", 5 }, { "ops", "OPS", 10 },
};

static void emit_clients(struct kv_emit *e, const struct kv_admin_status *st,
			 const struct kv_admin_client *cl)
{
	kv_emit_u64(e, "nr_clients", "clients", st->nr_clients);
	kv_emit_table_begin(e, "clients", client_cols,
			    ARRAY_LEN(client_cols));
	for (uint32_t i = 0; i < st->nr_records; i++) {
		kv_emit_row_begin(e);
		kv_emit_cell_u64(e, cl[i].id);
		kv_emit_cell_u64(e, cl[i].pid);
		kv_emit_cell_u64(e, cl[i].uid);
		kv_emit_cell_u64(e, cl[i].gid);
		kv_emit_cell_u64(e, cl[i].ns_id);
		kv_emit_cell_u64(e, cl[i].blocks);
		kv_emit_cell_u64(e, cl[i].refs);
		kv_emit_cell_u64(e, cl[i].sq_entries);
		kv_emit_cell_u64(e, cl[i].ops);
		kv_emit_row_end(e);
	}
	kv_emit_table_end(e);
}

static const char *hint(int err)
{
	switch (err) {
	case -ENOENT:
	case -ECONNREFUSED:
		return " (is kvd running, and is this its admin socket?)";
	case -ETIMEDOUT:
		return " (kvd accepted but did not answer in 5 s)";
	case -EPIPE:
	case -ECONNRESET:
		return " (kvd closed the connection: too many admin connections at once?)";
	case -EPROTO:
		return " (is this kvd's admin socket?)";
	}
	return "";
}

/* Check the reply's header and that its records fit what arrived. */
static int reply_check(const struct kv_admin_status *st, ssize_t n,
		       size_t rec)
{
	if (n < (ssize_t)sizeof(*st) || st->magic != KV_MAGIC ||
	    st->type != KV_MSG_ADMIN_REPLY)
		return -EPROTO;
	if (st->status)
		return st->status < 0 ? st->status : -EPROTO;
	if (st->nr_records > KV_ADMIN_MAX_RECORDS ||
	    sizeof(*st) + st->nr_records * rec > (size_t)n)
		return -EPROTO;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *opt_path = NULL, *cmd;
	struct kv_admin_status *st;
	struct kv_emit e;
	bool json = false;
	char path[108];
	uint32_t code;
	size_t rec;
	ssize_t n;
	void *buf;
	int o, ret;

	while ((o = getopt_long(argc, argv, "a:jh", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			opt_path = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "kvctl: %s\n", optind == argc ?
			"no command given" : "one command expected");
		usage(stderr);
		return 2;
	}
	cmd = argv[optind];
	if (!strcmp(cmd, "status")) {
		code = KV_ADMIN_STATUS;
		rec = sizeof(struct kv_admin_ns);
	} else if (!strcmp(cmd, "clients")) {
		code = KV_ADMIN_CLIENTS;
		rec = sizeof(struct kv_admin_client);
	} else {
		fprintf(stderr, "kvctl: unknown command '%s'\n", cmd);
		usage(stderr);
		return 2;
	}
	if (admin_path(opt_path, path, sizeof(path))) {
		fprintf(stderr, "kvctl: admin socket path too long\n");
		return 2;
	}
	buf = calloc(1, REPLY_MAX);
	if (!buf)
		return 1;
	n = admin_call(path, code, buf);
	st = buf;
	ret = n < 0 ? (int)n : reply_check(st, n, rec);
	if (ret) {
		fprintf(stderr, "kvctl: %s: %s%s\n", path, strerror(-ret),
			hint(ret));
		free(buf);
		return 1;
	}
	kv_emit_begin(&e, stdout, json);
	if (code == KV_ADMIN_STATUS)
		emit_status(&e, st, (void *)(st + 1));
	else
		emit_clients(&e, st, (void *)(st + 1));
	kv_emit_end(&e);
	free(buf);
	return 0;
}
