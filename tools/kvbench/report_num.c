// SPDX-License-Identifier: MIT
/*
 * The report's figures as a person reads them: a percentage as a
 * percentage with two or three significant digits, bytes in KiB, MiB or
 * GiB beside the exact count, a ratio of sizes as "5.08x", each with its
 * unit, where the emitter's own table form prints a bare %.6g. JSON keeps
 * the raw number under the same key: only the table changes.
 */
#include <math.h>
#include <stdio.h>

#include "report_num.h"

/* Two or three significant digits: 100 %, 29.4 %, 8.40 %, 0.03 %. */
static void fmt_pct(char *buf, size_t len, double pct)
{
	double a = fabs(pct);

	if (!isfinite(pct))
		snprintf(buf, len, "-");
	else if (a >= 99.95)
		snprintf(buf, len, "%.0f %%", pct);
	else if (a >= 10)
		snprintf(buf, len, "%.1f %%", pct);
	else
		snprintf(buf, len, "%.2f %%", pct);
}

void kvb_emit_pct(struct kv_emit *e, const char *key, const char *label,
		  double pct)
{
	char buf[32];

	if (e->json) {
		kv_emit_f64(e, key, label, pct);
		return;
	}
	fmt_pct(buf, sizeof(buf), pct);
	kv_emit_str(e, key, label, buf);
}

void kvb_emit_frac(struct kv_emit *e, const char *key, const char *label,
		   double v)
{
	char buf[48], pct[32];

	if (e->json) {
		kv_emit_f64(e, key, label, v);
		return;
	}
	fmt_pct(pct, sizeof(pct), 100.0 * v);
	snprintf(buf, sizeof(buf), "%.4f (%s)", v, pct);
	kv_emit_str(e, key, label, buf);
}

void kvb_emit_bytes(struct kv_emit *e, const char *key, const char *label,
		    uint64_t v)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
	double x = (double)v;
	char buf[64];
	int u = -1;

	if (e->json) {
		kv_emit_u64(e, key, label, v);
		return;
	}
	while (x >= 1024 && u < 3) {
		x /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, sizeof(buf), "%llu B", (unsigned long long)v);
	else
		snprintf(buf, sizeof(buf), "%.*f %s (%llu)", x < 10 ? 2 : 1,
			 x, unit[u], (unsigned long long)v);
	kv_emit_str(e, key, label, buf);
}

void kvb_emit_fixed(struct kv_emit *e, const char *key, const char *label,
		    double v, int prec, const char *unit)
{
	char buf[64];

	if (e->json) {
		kv_emit_f64(e, key, label, v);
		return;
	}
	snprintf(buf, sizeof(buf), "%.*f%s%s", prec, v, unit ? " " : "",
		 unit ? unit : "");
	kv_emit_str(e, key, label, buf);
}

void kvb_emit_times(struct kv_emit *e, const char *key, const char *label,
		    double v, const char *note)
{
	char buf[160];

	if (e->json) {
		kv_emit_f64(e, key, label, v);
		return;
	}
	snprintf(buf, sizeof(buf), "%.2fx%s%s", v, note ? "  " : "",
		 note ? note : "");
	kv_emit_str(e, key, label, buf);
}
