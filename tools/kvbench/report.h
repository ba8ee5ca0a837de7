/* SPDX-License-Identifier: MIT */
/* The report of the load and replay modes (report.c). */
#ifndef KVB_REPORT_H
#define KVB_REPORT_H

#include "kvbench.h"

/* Add up the processes' counts and samples; -1 out of memory. */
/* Sum counts, merge and sort samples (each process's sorted too). */
int kvb_aggregate(struct agg *a, struct child *ch, unsigned n,
		  unsigned models);

/* The report, as a table or as JSON, on @f. */
/* Mode, configuration, results, latency, pool, then one row per process. */
void kvb_report(FILE *f, bool json, const struct kvb_opts *o,
		const struct agg *a, const struct child *ch, bool ok);

/* The JSON report into @f (of --json), which it closes. */
int kvb_write_json(const struct kvb_opts *o, FILE *f, const struct agg *a,
		   const struct child *ch, bool ok);

#endif /* KVB_REPORT_H */
