/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen: GET /metrics over HTTP (libmicrohttpd), in a thread
 * of its own that never touches the loop's state (metrics_http.c).
 */
#ifndef KVD_METRICS_HTTP_H
#define KVD_METRICS_HTTP_H

struct kvd;

/*
 * kvd_metrics_start - listen on d->cfg.metrics_listen (nothing when it
 * is empty) and answer each GET /metrics by asking kvd's own admin
 * socket at @admin_path, as kvctl metrics does. Return: 0, or -1 with
 * why logged (the address taken, say).
 */
int kvd_metrics_start(struct kvd *d, const char *admin_path);

/* Stop the listener and its thread (nothing if none was started). */
void kvd_metrics_stop(struct kvd *d);

#endif /* KVD_METRICS_HTTP_H */
