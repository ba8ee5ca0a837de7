/* SPDX-License-Identifier: MIT */
/* The report's figures in the table form, with their units (report_num.c). */
#ifndef KVB_REPORT_NUM_H
#define KVB_REPORT_NUM_H

#include <stdint.h>

#include "../emit.h"

/*
 * Each prints, in the table, the figure with its unit and the digits a
 * reader needs; in JSON the same key and the raw number as ever
 * (kv_emit_f64 or kv_emit_u64), so that scripts read what they read.
 */

/* @pct already in percent: "8.40 %", "0.03 %", "100 %". */
void kvb_emit_pct(struct kv_emit *e, const char *key, const char *label,
		  double pct);
/* A fraction (0 to 1) such as a hit ratio: 4 decimals, then "(29.4 %)". */
void kvb_emit_frac(struct kv_emit *e, const char *key, const char *label,
		   double v);
/* A count of bytes: "11.9 MiB (12483328)". */
void kvb_emit_bytes(struct kv_emit *e, const char *key, const char *label,
		    uint64_t v);
/* @v with @prec decimals and @unit after it ("3.32 s", "4812 ops/s"). */
void kvb_emit_fixed(struct kv_emit *e, const char *key, const char *label,
		    double v, int prec, const char *unit);
/* A ratio of two sizes: "5.08x", and @note after it when not NULL. */
void kvb_emit_times(struct kv_emit *e, const char *key, const char *label,
		    double v, const char *note);

#endif /* KVB_REPORT_NUM_H */
