/* SPDX-License-Identifier: MIT */
/* kvctl top: a live view of kvd over its admin socket (ncurses). */
#ifndef KV_TOOLS_TOP_H
#define KV_TOOLS_TOP_H

/*
 * kvctl_top - poll kvd's admin socket at @path every @interval_ms
 * (STATUS, PREFIX, TIERS) and redraw the terminal until the user presses
 * q. A kvd that stops answering is said in the view and asked again.
 * Returns kvctl's exit status: 0 after q, 2 when stdout is not a
 * terminal (said on stderr), 1 when the terminal cannot be set up.
 */
int kvctl_top(const char *path, unsigned interval_ms);

#endif
