// SPDX-License-Identifier: MIT
/*
 * Calibration files of static (KV_QUANT_CHANNEL) scales. One line per
 * (K|V, layer, kv_head):
 *
 *     # comment
 *     k LAYER HEAD SCALE              one scale for all head_dim channels
 *     v LAYER HEAD S0 S1 ... Sd-1     one per channel
 *
 * Numbers are read in the "C" locale whatever the caller's is, so a file
 * means the same in every process.
 */
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv_kernels.h"

#define SCALES_SEP	" \t\r\n\v\f"

struct scales_file {
	const char		*path;
	const struct kv_layout	*l;
	char			*err;
	size_t			errlen;
	unsigned long		line;
	locale_t		c_locale;
	unsigned long		*first;	/* [layers][2][kv_heads]: line, 0 none */
	float			*s;	/* [layers][2][kv_heads][head_dim] */
	float			*row;	/* [head_dim]: one line's values */
};

static int __attribute__((format(printf, 2, 3)))
scales_error(struct scales_file *f, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!f->errlen)
		return -EINVAL;
	n = snprintf(f->err, f->errlen, "%s:%lu: ", f->path, f->line);
	if (n >= 0 && (size_t)n < f->errlen) {
		va_start(ap, fmt);
		vsnprintf(f->err + n, f->errlen - n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A decimal index below @limit: digits only. */
static int parse_index(struct scales_file *f, const char *tok,
		       const char *what, uint32_t limit, uint32_t *out)
{
	unsigned long v;
	char *end;

	if (!tok)
		return scales_error(f, "missing %s", what);
	if (*tok < '0' || *tok > '9')
		return scales_error(f, "%s '%s' is not a number", what, tok);
	errno = 0;
	v = strtoul(tok, &end, 10);
	if (*end)
		return scales_error(f, "%s '%s' is not a number", what, tok);
	if (errno || v >= limit)
		return scales_error(f, "%s %s out of range (the layout has %u)",
				    what, tok, limit);
	*out = (uint32_t)v;
	return 0;
}

static int parse_scale(struct scales_file *f, const char *tok, float *out)
{
	char *end;
	float v;

	v = strtof_l(tok, &end, f->c_locale);
	if (end == tok || *end)
		return scales_error(f, "scale '%s' is not a number", tok);
	if (!(v > 0.0f && v <= FLT_MAX))
		return scales_error(f, "scale '%s' is not finite and > 0", tok);
	*out = v;
	return 0;
}

/* One line, its comment cut off. Blank lines pass. */
static int parse_line(struct scales_file *f, char *line)
{
	const struct kv_layout *l = f->l;
	uint32_t layer, head, n = 0, kv;
	char *save, *tok, *hash = strchr(line, '#');
	unsigned long *first;
	float *dst;
	int ret;

	if (hash)
		*hash = '\0';
	tok = strtok_r(line, SCALES_SEP, &save);
	if (!tok)
		return 0;
	if (strcmp(tok, "k") && strcmp(tok, "v"))
		return scales_error(f, "'%s': a line starts with k or v", tok);
	kv = *tok == 'v';
	ret = parse_index(f, strtok_r(NULL, SCALES_SEP, &save), "layer",
			  l->layers, &layer);
	if (ret)
		return ret;
	ret = parse_index(f, strtok_r(NULL, SCALES_SEP, &save), "head",
			  l->kv_heads, &head);
	if (ret)
		return ret;
	while ((tok = strtok_r(NULL, SCALES_SEP, &save))) {
		if (n == l->head_dim)
			return scales_error(f, "more than %u scales (head_dim)",
					    l->head_dim);
		ret = parse_scale(f, tok, &f->row[n++]);
		if (ret)
			return ret;
	}
	if (!n)
		return scales_error(f, "missing scale");
	if (n != 1 && n != l->head_dim)
		return scales_error(f, "%u scales: 1 or %u (head_dim) expected",
				    n, l->head_dim);

	first = &f->first[((uint64_t)layer * 2 + kv) * l->kv_heads + head];
	if (*first)
		return scales_error(f, "duplicate %c %u %u (first on line %lu)",
				    kv ? 'v' : 'k', layer, head, *first);
	*first = f->line;
	dst = f->s + (((uint64_t)layer * 2 + kv) * l->kv_heads + head) *
		     l->head_dim;
	for (uint32_t d = 0; d < l->head_dim; d++)
		dst[d] = f->row[n == 1 ? 0 : d];
	return 0;
}

static int parse_file(struct scales_file *f, FILE *fp)
{
	const struct kv_layout *l = f->l;
	size_t cap = 0;
	char *line = NULL;
	int ret = 0;

	while (getline(&line, &cap, fp) >= 0) {
		f->line++;
		ret = parse_line(f, line);
		if (ret)
			break;
	}
	free(line);
	if (ret)
		return ret;
	if (ferror(fp))
		return scales_error(f, "read error");
	for (uint32_t i = 0; i < l->layers; i++)
		for (uint32_t kv = 0; kv < 2; kv++)
			for (uint32_t h = 0; h < l->kv_heads; h++)
				if (!f->first[((uint64_t)i * 2 + kv) *
					      l->kv_heads + h])
					return scales_error(f,
						"end of file: no line for %c %u %u",
						kv ? 'v' : 'k', i, h);
	return 0;
}

static int scales_open(struct scales_file *f, FILE **fp)
{
	int ret;

	*fp = fopen(f->path, "re");
	if (*fp)
		return 0;
	ret = -errno;
	if (f->errlen)
		snprintf(f->err, f->errlen, "%s: %s", f->path, strerror(-ret));
	return ret;
}

int kv_scales_load(const char *path, const struct kv_layout *l,
		   struct kv_scales *out, char *err, size_t errlen)
{
	struct scales_file f = {
		.path = path, .l = l, .err = err, .errlen = err ? errlen : 0,
	};
	uint64_t n;
	FILE *fp;
	int ret;

	if (f.errlen)
		err[0] = '\0';
	if (!path || !out || kv_check_layout(l))
		return -EINVAL;
	n = (uint64_t)l->layers * 2 * l->kv_heads;
	ret = scales_open(&f, &fp);
	if (ret)
		return ret;
	ret = -ENOMEM;
	f.c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	if (!f.c_locale)
		goto out_close;
	f.first = calloc(n, sizeof(*f.first));
	if (!f.first)
		goto out_locale;
	f.s = malloc(n * l->head_dim * sizeof(float));
	if (!f.s)
		goto out_first;
	f.row = malloc(l->head_dim * sizeof(float));
	if (!f.row)
		goto out_s;

	ret = parse_file(&f, fp);
	if (ret)
		goto out_row;
	out->layers = l->layers;
	out->kv_heads = l->kv_heads;
	out->head_dim = l->head_dim;
	out->s = f.s;
	f.s = NULL;
out_row:
	free(f.row);
out_s:
	free(f.s);
out_first:
	free(f.first);
out_locale:
	freelocale(f.c_locale);
out_close:
	fclose(fp);
	return ret;
}

void kv_scales_free(struct kv_scales *s)
{
	if (!s)
		return;
	free(s->s);
	memset(s, 0, sizeof(*s));
}
