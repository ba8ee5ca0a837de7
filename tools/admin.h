/* SPDX-License-Identifier: MIT */
/* The tools' side of kvd's admin socket (kvctl, kvbench). */
#ifndef KV_TOOLS_ADMIN_H
#define KV_TOOLS_ADMIN_H

#include <stdint.h>
#include <sys/types.h>

/*
 * kv_admin_call - send one KV_ADMIN_* request with its two arguments to
 * the admin socket at @path and receive the reply datagram into @buf
 * (KV_ADMIN_REPLY_MAX bytes). Returns the reply's bytes, or -errno
 * (-ETIMEDOUT when kvd does not answer in 5 s, -ECONNRESET when it
 * closed the connection). Thread-safe.
 */
ssize_t kv_admin_call(const char *path, uint32_t cmd, uint32_t arg0,
		      uint32_t arg1, void *buf);

/*
 * kv_admin_reply_check - is @st, a reply of @n bytes, well formed, kvd's
 * status 0, and its nr_records records of @rec bytes all there? 0, or
 * -EPROTO, or kvd's -errno.
 */
struct kv_admin_status;
int kv_admin_reply_check(const struct kv_admin_status *st, ssize_t n,
			 size_t rec);

/*
 * kv_admin_get - kv_admin_call of @cmd (no arguments) and the check of
 * its reply of @rec-byte records: their number, or -errno.
 */
int kv_admin_get(const char *path, uint32_t cmd, size_t rec, void *buf);

/*
 * kv_admin_send - the same for a request of its own (@len bytes at @req,
 * a struct kv_admin_req first: struct kv_admin_pin_req for PIN, UNPIN).
 */
ssize_t kv_admin_send(const char *path, const void *req, size_t len,
		      void *buf);

#endif
