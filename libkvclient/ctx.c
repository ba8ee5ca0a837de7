// SPDX-License-Identifier: MIT
/*
 * Context overflow policies as text and their checks, one grammar for
 * kvd.conf (kvd links this file), kvbench and engines: "none",
 * "truncate [stop|drop]", "window W", "sinks S W", the last two with an
 * optional "bos" or "bos-extra". No state, no allocation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"

#define CTX_MAX_WORDS	5

static const char *const kind_names[KV_CTX__MAX] = {
	[KV_CTX_NONE] = "none",
	[KV_CTX_TRUNCATE] = "truncate",
	[KV_CTX_WINDOW] = "window",
	[KV_CTX_SINKS] = "sinks",
};

/* Split @s at spaces and tabs into at most CTX_MAX_WORDS words of @buf. */
static int split(const char *s, char *buf, size_t len, char **w)
{
	char *save = NULL;
	int n = 0;

	if (strlen(s) >= len)
		return -EINVAL;
	strcpy(buf, s);
	for (char *tok = strtok_r(buf, " \t", &save); tok;
	     tok = strtok_r(NULL, " \t", &save)) {
		if (n == CTX_MAX_WORDS)
			return -EINVAL;
		w[n++] = tok;
	}
	return n;
}

/* A decimal number of tokens, 0..UINT32_MAX, digits only. */
static int number(const char *s, __u32 *out)
{
	unsigned long long v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(*s - '0');
		if (v > UINT32_MAX)
			return -EINVAL;
	}
	*out = (__u32)v;
	return 0;
}

static int bos_word(const char *s, __u32 *flags)
{
	if (!strcmp(s, "bos"))
		*flags |= KV_CTX_BOS;
	else if (!strcmp(s, "bos-extra"))
		*flags |= KV_CTX_BOS_EXTRA;
	else
		return -EINVAL;
	return 0;
}

static int parse_words(char **w, int n, struct kv_ctx_policy *p)
{
	int i;

	for (i = 0; i < KV_CTX__MAX; i++)
		if (!strcmp(w[0], kind_names[i]))
			break;
	if (i == KV_CTX__MAX)
		return -EINVAL;
	p->kind = (__u32)i;
	switch (p->kind) {
	case KV_CTX_NONE:
		return n == 1 ? 0 : -EINVAL;
	case KV_CTX_TRUNCATE:
		if (n == 1 || (n == 2 && !strcmp(w[1], "stop")))
			return 0;
		if (n == 2 && !strcmp(w[1], "drop")) {
			p->flags = KV_CTX_DROP_OLDEST;
			return 0;
		}
		return -EINVAL;
	case KV_CTX_WINDOW:
		if (n < 2 || n > 3 || number(w[1], &p->window))
			return -EINVAL;
		return n == 3 ? bos_word(w[2], &p->flags) : 0;
	default:
		if (n < 3 || n > 4 || number(w[1], &p->sinks) ||
		    number(w[2], &p->window))
			return -EINVAL;
		return n == 4 ? bos_word(w[3], &p->flags) : 0;
	}
}

int kv_ctx_policy_parse(const char *s, struct kv_ctx_policy *p)
{
	struct kv_ctx_policy np = { 0 };
	char buf[128], *w[CTX_MAX_WORDS];
	int n, ret;

	if (!s || !p)
		return -EINVAL;
	n = split(s, buf, sizeof(buf), w);
	if (n <= 0)
		return -EINVAL;
	ret = parse_words(w, n, &np);
	if (ret)
		return ret;
	*p = np;
	return 0;
}

static int refuse(const char **why, const char *msg)
{
	if (why)
		*why = msg;
	return -EINVAL;
}

/* The flags each kind takes. */
static const __u32 kind_flags[KV_CTX__MAX] = {
	[KV_CTX_NONE] = 0,
	[KV_CTX_TRUNCATE] = KV_CTX_DROP_OLDEST,
	[KV_CTX_WINDOW] = KV_CTX_BOS_EXTRA,
	[KV_CTX_SINKS] = KV_CTX_BOS | KV_CTX_BOS_EXTRA,
};

int kv_ctx_policy_check(const struct kv_ctx_policy *p, uint32_t max_context,
			const char **why)
{
	uint64_t keep;

	if (!p)
		return refuse(why, "no policy");
	if (p->kind >= KV_CTX__MAX)
		return refuse(why, "unknown policy kind");
	if (p->flags & ~kind_flags[p->kind])
		return refuse(why, "a flag this policy does not take");
	if ((p->flags & KV_CTX_BOS) && (p->flags & KV_CTX_BOS_EXTRA))
		return refuse(why, "bos and bos-extra together");
	if (p->kind == KV_CTX_NONE || p->kind == KV_CTX_TRUNCATE) {
		if (p->sinks || p->window)
			return refuse(why, "sinks or window given to none or truncate");
		if (p->kind == KV_CTX_TRUNCATE && !max_context)
			return refuse(why, "truncate needs a max_context");
		return 0;
	}
	if (!p->window)
		return refuse(why, "window 0");
	if (p->kind == KV_CTX_WINDOW && p->sinks)
		return refuse(why, "sinks given to window (use sinks S W)");
	if ((p->flags & KV_CTX_BOS) && !p->sinks)
		return refuse(why, "bos counted among 0 sinks");
	keep = (uint64_t)p->sinks + p->window +
	       !!(p->flags & KV_CTX_BOS_EXTRA);
	if (max_context && keep > max_context)
		return refuse(why, "sinks + window above max_context");
	return 0;
}

int kv_ctx_policy_format(const struct kv_ctx_policy *p, char *buf, size_t len)
{
	const char *bos;

	if (!p || (!buf && len) || p->kind >= KV_CTX__MAX)
		return -EINVAL;
	bos = p->flags & KV_CTX_BOS ? " bos" :
	      p->flags & KV_CTX_BOS_EXTRA ? " bos-extra" : "";
	switch (p->kind) {
	case KV_CTX_NONE:
		return snprintf(buf, len, "none");
	case KV_CTX_TRUNCATE:
		return snprintf(buf, len, "truncate %s",
				p->flags & KV_CTX_DROP_OLDEST ? "drop" : "stop");
	case KV_CTX_WINDOW:
		return snprintf(buf, len, "window %u%s", p->window, bos);
	default:
		return snprintf(buf, len, "sinks %u %u%s", p->sinks, p->window,
				bos);
	}
}
