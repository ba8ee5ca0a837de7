// SPDX-License-Identifier: MIT
/*
 * The tools' side of kvd's admin socket (kvctl, kvbench): one
 * SOCK_SEQPACKET request, one reply datagram, with a timeout so a hung
 * kvd never hangs the tool.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <kv/abi.h>

#include "admin.h"

ssize_t kv_admin_call(const char *path, uint32_t cmd, uint32_t arg0,
		      uint32_t arg1, void *buf)
{
	struct kv_admin_req req = {
		.magic = KV_MAGIC, .abi_major = KV_ABI_MAJOR,
		.abi_minor = KV_ABI_MINOR, .type = KV_MSG_ADMIN, .cmd = cmd,
		.arg = { arg0, arg1 },
	};

	return kv_admin_send(path, &req, sizeof(req), buf);
}

int kv_admin_reply_check(const struct kv_admin_status *st, ssize_t n,
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

int kv_admin_get(const char *path, uint32_t cmd, size_t rec, void *buf)
{
	const struct kv_admin_status *st = buf;
	ssize_t n = kv_admin_call(path, cmd, 0, 0, buf);
	int ret = n < 0 ? (int)n : kv_admin_reply_check(st, n, rec);

	return ret ? ret : (int)st->nr_records;
}

ssize_t kv_admin_send(const char *path, const void *req, size_t len,
		      void *buf)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	ssize_t n;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A kvd that accepts but never answers must not hang the tool. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
		n = -errno;
		goto out;
	}
	n = recv(fd, buf, KV_ADMIN_REPLY_MAX, 0);
	if (n < 0)
		n = errno == EAGAIN ? -ETIMEDOUT : -errno;
	else if (n == 0)
		n = -ECONNRESET;
out:
	close(fd);
	return n;
}
