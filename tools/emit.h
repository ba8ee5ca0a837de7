/* SPDX-License-Identifier: MIT */
/*
 * One emitter for the tools' output, in the manner of jemalloc's
 * emitter.h: the same calls print a human table or JSON, so the two
 * forms never drift apart. Not thread-safe; one emitter per stream.
 */
#ifndef KV_TOOLS_EMIT_H
#define KV_TOOLS_EMIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define KV_EMIT_MAX_DEPTH	8
#define KV_EMIT_MAX_COLS	16

struct kv_emit_col {
	const char	*key;		/* JSON key */
	const char	*header;	/* table header */
	int		width;		/* table column width; < 0 left-aligned */
};

struct kv_emit {
	FILE		*f;
	bool		json;
	int		depth;
	bool		need_comma[KV_EMIT_MAX_DEPTH];
	/* current table */
	const struct kv_emit_col *cols;
	int		ncols;
	int		col;
};

void kv_emit_begin(struct kv_emit *e, FILE *f, bool json);
void kv_emit_end(struct kv_emit *e);
/* A nested object; in table form a heading line ("label:"). */
void kv_emit_obj_begin(struct kv_emit *e, const char *key, const char *label);
void kv_emit_obj_end(struct kv_emit *e);
/* One "label: value" line, or "key": value. */
void kv_emit_u64(struct kv_emit *e, const char *key, const char *label,
		 uint64_t v);
void kv_emit_i64(struct kv_emit *e, const char *key, const char *label,
		 int64_t v);
void kv_emit_f64(struct kv_emit *e, const char *key, const char *label,
		 double v);
void kv_emit_str(struct kv_emit *e, const char *key, const char *label,
		 const char *v);
/* A flag: JSON true/false, "yes"/"no" for people. */
void kv_emit_bool(struct kv_emit *e, const char *key, const char *label,
		  bool v);
/* A table: JSON array of objects keyed by cols[].key. */
void kv_emit_table_begin(struct kv_emit *e, const char *key,
			 const struct kv_emit_col *cols, int ncols);
void kv_emit_row_begin(struct kv_emit *e);
void kv_emit_cell_u64(struct kv_emit *e, uint64_t v);
void kv_emit_cell_f64(struct kv_emit *e, double v);
void kv_emit_cell_str(struct kv_emit *e, const char *v);
void kv_emit_cell_bool(struct kv_emit *e, bool v);
void kv_emit_row_end(struct kv_emit *e);
void kv_emit_table_end(struct kv_emit *e);

#endif
