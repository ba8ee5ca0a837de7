/* SPDX-License-Identifier: MIT */
/* kvctl events (tools/kvevents.c). */
#ifndef KV_TOOLS_KVEVENTS_H
#define KV_TOOLS_KVEVENTS_H

#include <stdint.h>

/*
 * kvctl_events - subscribe to kvd's KV events at @endpoint (kvd
 * --kv-events) and print each event as one JSON line, until @count
 * events (0: until SIGINT or SIGTERM). Returns the exit status: 0, or 1
 * when the endpoint cannot be subscribed to.
 */
int kvctl_events(const char *endpoint, uint32_t count);

#endif
