// SPDX-License-Identifier: MIT
/*
 * sd_notify for a Type=notify unit: the manager starts the units ordered
 * after kvd's only once READY=1 came, so it is sent once, when clients
 * can connect; `systemctl status` shows the last STATUS= line, sent at
 * most once a second and only when it changed. libsystemd does nothing
 * without $NOTIFY_SOCKET; checking it once also spares every tick the
 * formatting.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "daemon.h"
#include "notify.h"

#define STATUS_PERIOD_NS	1000000000ULL

static bool notify_on;
static bool notify_ready;
static uint64_t status_ns;
static char status_last[128];

static void notify_status(struct kvd *d)
{
	char msg[sizeof(status_last)];

	snprintf(msg, sizeof(msg), "STATUS=%u clients, %u/%u pool pages used",
		 d->nr_clients, d->pool.pages_used, d->pool.nr_pages);
	if (!strcmp(msg, status_last))
		return;
	if (sd_notify(0, msg) > 0)
		memcpy(status_last, msg, sizeof(msg));
}

void kvd_notify_ready(struct kvd *d)
{
	const char *env = getenv("NOTIFY_SOCKET");
	int ret;

	notify_on = env && *env;
	if (!notify_on || notify_ready)
		return;
	ret = sd_notify(0, "READY=1");
	if (ret < 0)
		kvd_warn("sd_notify READY=1: %s", strerror(-ret));
	notify_ready = true;
	status_ns = kvd_now_ns();
	notify_status(d);
}

void kvd_notify_tick(struct kvd *d)
{
	uint64_t now;

	if (!notify_on)
		return;
	now = kvd_now_ns();
	if (now - status_ns < STATUS_PERIOD_NS)
		return;
	status_ns = now;
	notify_status(d);
}

void kvd_notify_stopping(void)
{
	if (notify_on)
		sd_notify(0, "STOPPING=1");
}
