// SPDX-License-Identifier: MIT
/*
 * kvd's Prometheus endpoint. The loop that serves rings is one thread
 * and its books are not locked, so the HTTP server runs in
 * libmicrohttpd's own polling thread and reads nothing of struct kvd:
 * a scrape connects to the admin socket like any kvctl, and the loop
 * answers it between ring passes as it answers kvctl.
 */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../tools/metrics.h"
#include "config.h"
#include "daemon.h"
#include "kvd.h"
#include "metrics_http.h"

struct kvd_metrics {
	struct MHD_Daemon *mhd;
	char		admin_path[KVD_CONF_PATH_MAX];
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code,
			     char *body, size_t len)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, code == 200 ?
				"text/plain; version=0.0.4; charset=utf-8" :
				"text/plain; charset=utf-8");
	ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned code,
				  const char *text)
{
	char *body = strdup(text);

	return body ? reply(conn, code, body, strlen(body)) : MHD_NO;
}

/* GET /metrics: the admin socket's figures, formatted (tools/metrics.c). */
static enum MHD_Result scrape(struct kvd_metrics *m,
			      struct MHD_Connection *conn)
{
	char *body = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&body, &len);
	int ret;

	if (!f)
		return reply_text(conn, 500, "out of memory\n");
	ret = kv_metrics_write(f, m->admin_path);
	if (fclose(f) || !body)
		return reply_text(conn, 500, "out of memory\n");
	if (ret) {
		free(body);
		return reply_text(conn, 503, "kvd's admin socket did not answer\n");
	}
	return reply(conn, 200, body, len);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_len, void **con_cls)
{
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply_text(conn, 405, "GET /metrics\n");
	if (strcmp(url, "/metrics"))
		return reply_text(conn, 404, "GET /metrics\n");
	return scrape(cls, conn);
}

int kvd_metrics_start(struct kvd *d, const char *admin_path)
{
	struct sockaddr_storage ss;
	struct kvd_metrics *m;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	if (!d->cfg.metrics_listen[0])
		return 0;
	if (kvd_parse_listen(d->cfg.metrics_listen, &ss))
		goto bad;	/* checked when set: never here */
	m = calloc(1, sizeof(*m));
	if (!m)
		goto bad;
	snprintf(m->admin_path, sizeof(m->admin_path), "%s", admin_path);
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* Scrapes are rare and small: a few at once, none held long. */
	m->mhd = MHD_start_daemon(flags, 0, NULL, NULL, answer, m,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				  MHD_OPTION_CONNECTION_LIMIT, 16U,
				  MHD_OPTION_CONNECTION_TIMEOUT, 10U,
				  MHD_OPTION_END);
	if (!m->mhd) {
		free(m);
		goto bad;
	}
	d->metrics = m;
	kvd_info("metrics on http://%s/metrics", d->cfg.metrics_listen);
	return 0;
bad:
	kvd_err("--metrics-listen %s: cannot listen there (taken, or not an address of this host?)",
		d->cfg.metrics_listen);
	return -1;
}

void kvd_metrics_stop(struct kvd *d)
{
	if (!d->metrics)
		return;
	MHD_stop_daemon(d->metrics->mhd);
	free(d->metrics);
	d->metrics = NULL;
}
