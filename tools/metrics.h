/* SPDX-License-Identifier: MIT */
/*
 * kvd's figures in the Prometheus text exposition format (version
 * 0.0.4), from its admin socket: kvctl metrics prints it, kvd's
 * --metrics-listen serves it (kvd/metrics_http.c).
 */
#ifndef KV_TOOLS_METRICS_H
#define KV_TOOLS_METRICS_H

#include <stdio.h>

/*
 * kv_metrics_write - ask the kvd at admin socket @path (STATUS, PREFIX,
 * TENANTS, TIERS, OPS: one connection each) and write its figures to @f.
 * Returns 0, or -errno when STATUS fails (nothing written then); a later
 * call that fails (an older kvd without KV_ADMIN_OPS) leaves its
 * families out. Thread-safe: it touches no state but @f.
 */
int kv_metrics_write(FILE *f, const char *path);

#endif
