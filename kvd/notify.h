/* SPDX-License-Identifier: MIT */
/*
 * The systemd service manager's notification protocol (sd_notify(3)):
 * READY=1 once the sockets listen and the loop serves, STATUS= lines
 * from the tick, STOPPING=1 at the end. Without $NOTIFY_SOCKET (not
 * under a Type=notify unit) every call does nothing.
 */
#ifndef KVD_NOTIFY_H
#define KVD_NOTIFY_H

struct kvd;

void kvd_notify_ready(struct kvd *d);
void kvd_notify_tick(struct kvd *d);
void kvd_notify_stopping(void);

#endif /* KVD_NOTIFY_H */
