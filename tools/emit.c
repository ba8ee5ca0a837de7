// SPDX-License-Identifier: MIT
/*
 * The emitter's two forms (emit.h): an indented table for people, JSON
 * for scripts, from the same calls.
 */
#include <math.h>
#include <string.h>

#include "emit.h"

static void indent(struct kv_emit *e)
{
	for (int i = 0; i < e->depth; i++)
		fputs(e->json ? "  " : "  ", e->f);
}

/* JSON: comma and newline before every member but the first. */
static void json_sep(struct kv_emit *e)
{
	if (e->need_comma[e->depth])
		fputc(',', e->f);
	fputc('\n', e->f);
	e->need_comma[e->depth] = true;
	indent(e);
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void json_key(struct kv_emit *e, const char *key)
{
	json_sep(e);
	if (key) {
		json_string(e->f, key);
		fputs(": ", e->f);
	}
}

void kv_emit_begin(struct kv_emit *e, FILE *f, bool json)
{
	memset(e, 0, sizeof(*e));
	e->f = f;
	e->json = json;
	if (json) {
		fputc('{', f);
		e->depth = 1;
	}
}

void kv_emit_end(struct kv_emit *e)
{
	if (e->json)
		fputs("\n}\n", e->f);
	fflush(e->f);
}

void kv_emit_obj_begin(struct kv_emit *e, const char *key, const char *label)
{
	if (e->json) {
		json_key(e, key);
		fputc('{', e->f);
	} else {
		indent(e);
		fprintf(e->f, "%s:\n", label);
	}
	if (e->depth + 1 < KV_EMIT_MAX_DEPTH)
		e->depth++;
	e->need_comma[e->depth] = false;
}

void kv_emit_obj_end(struct kv_emit *e)
{
	e->depth--;
	if (e->json) {
		fputc('\n', e->f);
		indent(e);
		fputc('}', e->f);
	}
}

static void label(struct kv_emit *e, const char *l)
{
	indent(e);
	fprintf(e->f, "%-24s ", l);
}

void kv_emit_u64(struct kv_emit *e, const char *key, const char *l, uint64_t v)
{
	if (e->json) {
		json_key(e, key);
		fprintf(e->f, "%llu", (unsigned long long)v);
	} else {
		label(e, l);
		fprintf(e->f, "%llu\n", (unsigned long long)v);
	}
}

void kv_emit_i64(struct kv_emit *e, const char *key, const char *l, int64_t v)
{
	if (e->json) {
		json_key(e, key);
		fprintf(e->f, "%lld", (long long)v);
	} else {
		label(e, l);
		fprintf(e->f, "%lld\n", (long long)v);
	}
}

static void json_f64(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

void kv_emit_f64(struct kv_emit *e, const char *key, const char *l, double v)
{
	if (e->json) {
		json_key(e, key);
		json_f64(e->f, v);
	} else {
		label(e, l);
		fprintf(e->f, "%.6g\n", v);
	}
}

void kv_emit_str(struct kv_emit *e, const char *key, const char *l,
		 const char *v)
{
	if (e->json) {
		json_key(e, key);
		json_string(e->f, v);
	} else {
		label(e, l);
		fprintf(e->f, "%s\n", v);
	}
}

/* JSON true/false; "yes"/"no" in the table. */
void kv_emit_bool(struct kv_emit *e, const char *key, const char *l, bool v)
{
	if (e->json) {
		json_key(e, key);
		fputs(v ? "true" : "false", e->f);
	} else {
		label(e, l);
		fprintf(e->f, "%s\n", v ? "yes" : "no");
	}
}

void kv_emit_table_begin(struct kv_emit *e, const char *key,
			 const struct kv_emit_col *cols, int ncols)
{
	e->cols = cols;
	e->ncols = ncols;
	if (e->json) {
		json_key(e, key);
		fputc('[', e->f);
		e->depth++;
		e->need_comma[e->depth] = false;
		return;
	}
	indent(e);
	for (int i = 0; i < ncols; i++)
		fprintf(e->f, "%*s%s", cols[i].width, cols[i].header,
			i + 1 < ncols ? " " : "\n");
}

void kv_emit_row_begin(struct kv_emit *e)
{
	e->col = 0;
	if (e->json) {
		json_sep(e);
		fputc('{', e->f);
	} else {
		indent(e);
	}
}

static void cell_start(struct kv_emit *e)
{
	if (e->json) {
		if (e->col)
			fputs(", ", e->f);
		json_string(e->f, e->cols[e->col].key);
		fputs(": ", e->f);
	}
}

static void cell_end(struct kv_emit *e)
{
	if (!e->json)
		fputc(e->col + 1 < e->ncols ? ' ' : '\n', e->f);
	e->col++;
}

void kv_emit_cell_u64(struct kv_emit *e, uint64_t v)
{
	cell_start(e);
	if (e->json)
		fprintf(e->f, "%llu", (unsigned long long)v);
	else
		fprintf(e->f, "%*llu", e->cols[e->col].width,
			(unsigned long long)v);
	cell_end(e);
}

void kv_emit_cell_f64(struct kv_emit *e, double v)
{
	cell_start(e);
	if (e->json)
		json_f64(e->f, v);
	else
		fprintf(e->f, "%*.3f", e->cols[e->col].width, v);
	cell_end(e);
}

void kv_emit_cell_str(struct kv_emit *e, const char *v)
{
	cell_start(e);
	if (e->json)
		json_string(e->f, v);
	else
		fprintf(e->f, "%*s", e->cols[e->col].width, v);
	cell_end(e);
}

void kv_emit_cell_bool(struct kv_emit *e, bool v)
{
	cell_start(e);
	if (e->json)
		fputs(v ? "true" : "false", e->f);
	else
		fprintf(e->f, "%*s", e->cols[e->col].width, v ? "yes" : "no");
	cell_end(e);
}

void kv_emit_row_end(struct kv_emit *e)
{
	if (e->json)
		fputc('}', e->f);
}

void kv_emit_table_end(struct kv_emit *e)
{
	if (e->json) {
		e->depth--;
		fputc('\n', e->f);
		indent(e);
		fputc(']', e->f);
	} else {
		fputc('\n', e->f);
	}
}
