// SPDX-License-Identifier: MIT
/*
 * kvd.conf's context keys of a [namespace] section: max_context,
 * context_policy (kv_ctx_policy_parse's grammar, with a message naming
 * what is wrong) and context_policies (the kinds the model takes, kept
 * as the refused mask). Setters of the key table (conf_parse.c), as
 * conf_key.h describes them.
 */
#include <stdio.h>
#include <string.h>

#include <kv/kv.h>	/* kv_ctx_policy_parse (libkvclient/ctx.c, linked in) */

#include "conf_key.h"

/* The kinds as context_policies names them (enum kv_ctx_kind). */
static const char *const ctx_kinds[KV_CTX__MAX] = {
	[KV_CTX_NONE] = "none",
	[KV_CTX_TRUNCATE] = "truncate",
	[KV_CTX_WINDOW] = "window",
	[KV_CTX_SINKS] = "sinks",
};

#define CTX_GRAMMAR	"none, truncate [stop|drop], window W or sinks S W, the last two optionally followed by bos or bos-extra"

static const char *const ctx_usage[KV_CTX__MAX] = {
	[KV_CTX_NONE] = "none, with nothing after it",
	[KV_CTX_TRUNCATE] = "truncate, truncate stop or truncate drop",
	[KV_CTX_WINDOW] = "window W, W a decimal number of tokens, optionally followed by bos-extra",
	[KV_CTX_SINKS] = "sinks S W, S and W decimal numbers of tokens, optionally followed by bos or bos-extra",
};

static int ctx_kind_of(const char *s, size_t len)
{
	for (int i = 0; i < KV_CTX__MAX; i++)
		if (strlen(ctx_kinds[i]) == len &&
		    !strncmp(s, ctx_kinds[i], len))
			return i;
	return -1;
}

/* tokens = N: decimal, 0 (no limit) to 2^31 - 1. */
int conf_set_max_context(struct conf_ctx *c, const struct conf_key *k,
			   const char *val, void *dst)
{
	uint64_t v;

	if (!conf_all_digits(val))
		return conf_err(c, "%s: '%s' is not a number of tokens (0 to %u; 0: no limit)",
				c->name, val, KVD_CONF_CONTEXT_MAX);
	if (conf_parse_dec(val, k->max, &v))
		return conf_err(c, "%s: '%s' is out of range (at most %u tokens, 2^31 - 1)",
				c->name, val, KVD_CONF_CONTEXT_MAX);
	*(uint32_t *)dst = (uint32_t)v;
	return 0;
}

static bool ctx_is_number(const char *w, size_t len)
{
	return strspn(w, "0123456789") >= len;
}

/* The words of a policy after its kind that are not numbers. */
static bool ctx_word_known(const char *w, size_t len)
{
	static const char *const words[] = { "stop", "drop", "bos", "bos-extra" };

	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (strlen(words[i]) == len && !strncmp(w, words[i], len))
			return true;
	return false;
}

/* A number of @len digits at @w fits a __u32 of struct kv_ctx_policy. */
static bool ctx_number_fits(const char *w, size_t len)
{
	uint64_t v = 0;

	for (size_t i = 0; i < len; i++) {
		v = v * 10 + (uint64_t)(w[i] - '0');
		if (v > UINT32_MAX)
			return false;
	}
	return true;
}

/*
 * Why kv_ctx_policy_parse refused @val, which it does not say: an
 * unknown kind, an unknown word, a number too large, or else the kind's
 * grammar (words missing, in the wrong order, too many).
 */
static int ctx_parse_err(struct conf_ctx *c, const char *val)
{
	const char *w;
	size_t len;
	int kind;

	w = conf_next_token(val, &len);
	kind = w ? ctx_kind_of(w, len) : -1;
	if (kind < 0)
		return conf_err(c, "%s: unknown policy '%.*s' (%s)", c->name,
				(int)len, w ? w : "", CTX_GRAMMAR);
	while ((w = conf_next_token(w + len, &len))) {
		if (!ctx_is_number(w, len) && !ctx_word_known(w, len))
			return conf_err(c, "%s: unknown word '%.*s' in '%s' (%s)",
					c->name, (int)len, w, val,
					ctx_usage[kind]);
		if (ctx_is_number(w, len) && !ctx_number_fits(w, len))
			return conf_err(c, "%s: '%.*s' is more than %u tokens",
					c->name, (int)len, w, UINT32_MAX);
	}
	return conf_err(c, "%s: '%s' is not %s", c->name, val,
			ctx_usage[kind]);
}

/*
 * context_policy = POLICY: its grammar here; its values at the section's
 * end (check_ctx), when max_context is known whatever the key order.
 */
int conf_set_ctx_policy(struct conf_ctx *c, const struct conf_key *k,
			  const char *val, void *dst)
{
	if (kv_ctx_policy_parse(val, dst))
		return ctx_parse_err(c, val);
	return 0;
}

/* context_policies = LIST: kind names; stored as the kinds refused. */
int conf_set_ctx_kinds(struct conf_ctx *c, const struct conf_key *k,
			 const char *val, void *dst)
{
	uint32_t listed = 0, all = (1U << KV_CTX__MAX) - 1;
	const char *s;
	size_t len;
	int kind;

	for (s = conf_next_token(val, &len); s; s = conf_next_token(s + len, &len)) {
		kind = ctx_kind_of(s, len);
		if (kind < 0)
			return conf_err(c, "%s: unknown policy '%.*s' (none, truncate, window or sinks)",
					c->name, (int)len, s);
		if (listed & 1U << kind)
			return conf_err(c, "%s: '%s' is listed twice", c->name,
					ctx_kinds[kind]);
		listed |= 1U << kind;
	}
	if (!listed)
		return conf_err(c, "%s: empty list (none, truncate, window or sinks, separated by commas or spaces)",
				c->name);
	if (!(listed & 1U << KV_CTX_NONE))
		return conf_err(c, "%s: '%s' lacks none (a sequence must always be able to open without a policy)",
				c->name, val);
	*(uint32_t *)dst = all & ~listed;
	return 0;
}

/* " (4 + 4096 > 4096)": what a policy keeps against max_context. */
void conf_ctx_sum(const struct kv_ctx_policy *pol, uint32_t max,
		    char *buf, size_t len)
{
	const char *bos = pol->flags & KV_CTX_BOS_EXTRA ? " + 1" : "";

	if (pol->kind == KV_CTX_SINKS)
		snprintf(buf, len, " (%u + %u%s > %u)", pol->sinks,
			 pol->window, bos, max);
	else
		snprintf(buf, len, " (%u%s > %u)", pol->window, bos, max);
}

/* The name of policy kind @kind, as context_policies writes it. */
const char *conf_ctx_kind(uint32_t kind)
{
	return kind < KV_CTX__MAX ? ctx_kinds[kind] : "?";
}

_Static_assert(KV_CTX__MAX == 4 && 1U << KV_CTX__MAX <= 32,
	       "ctx_kinds[] and the refused mask name every kind");
