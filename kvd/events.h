/* SPDX-License-Identifier: MIT */
/*
 * KV events (kvd/events.c): blocks stored and removed, published on a
 * ZMQ PUB socket in vLLM's KV-event format, for KV-aware routers.
 */
#ifndef KVD_EVENTS_H
#define KVD_EVENTS_H

struct kvd;

/*
 * kvd_events_init - bind d->cfg.kv_events (nothing when empty) and hook
 * the pool's commits and evictions: 0, or -errno with @why. The loop's
 * thread alone calls these. kvd_events_flush - send what was packed (the
 * tick). kvd_events_exit - flush, close, unhook.
 */
int kvd_events_init(struct kvd *d, const char **why);
void kvd_events_flush(struct kvd *d);
void kvd_events_exit(struct kvd *d);

#endif /* KVD_EVENTS_H */
