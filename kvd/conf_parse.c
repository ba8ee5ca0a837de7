// SPDX-License-Identifier: MIT
/*
 * The kvd.conf front-end of the key table (format and every key:
 * man/man5/kvd.conf.5): the lexer, sections, and the keys of [tenant]
 * and [namespace] sections.
 *
 * The file is read one line at a time into a buffer on the stack; each
 * line is a comment, a blank, a [section] header or "key = value". The
 * global section's keys are the table of config.c (those with a name in
 * kvd.conf); a section's keys are a small table here. Checks that need a
 * whole section (a tenant's secret, min <= max, a context policy against
 * max_context) run when the next section starts or the file ends; checks
 * that need the whole file (a namespace's tenant exists) run at the end.
 * Context policies are read and checked by libkvclient's ctx.c, linked
 * into kvd, so kvd.conf and the client library take one grammar.
 *
 * The first error stops the parse: one "PATH:LINE: why" in the caller's
 * buffer, everything allocated so far freed. Secrets never appear in a
 * message, and no copy of one outlives the parse but the tenant's own
 * (the line, stdio's buffer and grown arrays are zeroed; kvd_conf_free
 * zeroes the tenants). A reload parses into a fresh struct and swaps it
 * in only on success (tenant.c), so a bad file never half-applies.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kv/kv.h>

#include "conf_key.h"

enum conf_section { SECT_GLOBAL, SECT_TENANT, SECT_NAMESPACE };

#define NR_KEYS_MAX	KVD_NR_KEYS

struct parser {
	struct conf_ctx		c;		/* path, line, err, conf */
	enum conf_section	sect;
	unsigned		sect_line;	/* of its header; 0: global */
	char			where[128];	/* "global section", "[tenant a]" */
	const struct conf_key	*keys;		/* of this section */
	size_t			nr_keys;
	unsigned		set_on[NR_KEYS_MAX];	/* line of each key, 0: unset */
	uint32_t		cap_tenants;
	uint32_t		cap_quotas;
};

#define perr(p, ...)	conf_err(&(p)->c, __VA_ARGS__)

static __printf(3, 4) int perr_at(struct parser *p, unsigned line,
				  const char *fmt, ...)
{
	unsigned now = p->c.line;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p->c.line = line;
	perr(p, "%s", msg);
	p->c.line = now;
	return -EINVAL;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static char *skip_blanks(char *s)
{
	while (is_blank(*s))
		s++;
	return s;
}

static int hex_val(char c)
{
	if (conf_is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void *sect_base(struct parser *p)
{
	struct kvd_conf *conf = p->c.conf;

	switch (p->sect) {
	case SECT_TENANT:
		return &conf->tenants[conf->nr_tenants - 1];
	case SECT_NAMESPACE:
		return &conf->quotas[conf->nr_quotas - 1];
	default:
		return conf;
	}
}

/* Line the key @name was set on in this section, 0 if it was not. */
static unsigned key_line(const struct parser *p, const char *name)
{
	for (size_t i = 0; i < p->nr_keys; i++)
		if (p->keys[i].name && !strcmp(p->keys[i].name, name))
			return p->set_on[i];
	return 0;
}

/* The tenant other than @self that lists @id as a uid (or gid), if any. */
static const struct kvd_tenant_conf *id_owner(const struct kvd_conf *conf,
					      const struct kvd_tenant_conf *self,
					      uint32_t id, bool group)
{
	for (uint32_t i = 0; i < conf->nr_tenants; i++) {
		const struct kvd_tenant_conf *t = &conf->tenants[i];
		const uint32_t *ids = group ? t->gids : t->uids;
		uint32_t nr = group ? t->nr_gids : t->nr_uids;

		if (t == self)
			continue;
		for (uint32_t j = 0; j < nr; j++)
			if (ids[j] == id)
				return t;
	}
	return NULL;
}

/* uids = / gids = : names or numbers, each in one tenant only. */
static int set_ids(struct conf_ctx *c, const struct conf_key *k,
		   const char *val, void *dst)
{
	struct parser *p = (struct parser *)c;
	struct kvd_tenant_conf *t = dst;
	const struct kvd_tenant_conf *other;
	bool group = !strcmp(k->name, "gids");
	const char *what = group ? "gid" : "uid", *s;
	char tok[KVD_CONF_LINE_MAX + 1], named[KVD_CONF_LINE_MAX + 4];
	uint32_t *ids, nr = 0, n = 0, unused;
	size_t len;
	int ret;

	for (s = conf_next_token(val, &len); s; s = conf_next_token(s + len, &len))
		nr++;
	if (!nr)
		return perr(p, "%s: empty list (names or numeric %ss, separated by commas or spaces)",
			    k->name, what);
	ids = calloc(nr, sizeof(*ids));
	if (!ids)
		return conf_err_nomem(c);
	for (s = conf_next_token(val, &len); s; s = conf_next_token(s + len, &len)) {
		memcpy(tok, s, len);
		tok[len] = 0;
		if (conf_all_digits(tok)) {
			if (conf_parse_id(tok, &ids[n])) {
				ret = perr(p, "%s: '%s' is not a valid %s",
					   k->name, tok, what);
				goto out_free;
			}
		} else {
			ret = conf_lookup(group ? BY_GROUP_NAME : BY_USER_NAME,
					  tok, 0, &ids[n], &unused, NULL, 0);
			if (ret) {
				ret = conf_err_lookup(c, group ? "group" : "user",
						      tok, ret);
				goto out_free;
			}
		}
		/* "uid 0 (root)" for a name, "uid 0" for a number */
		named[0] = 0;
		if (!conf_all_digits(tok))
			snprintf(named, sizeof(named), " (%s)", tok);
		for (uint32_t i = 0; i < n; i++) {
			if (ids[i] == ids[n]) {
				ret = perr(p, "%s: %s %u%s is listed twice",
					   k->name, what, ids[n], named);
				goto out_free;
			}
		}
		other = id_owner(p->c.conf, t, ids[n], group);
		if (other) {
			ret = perr(p, "%s: %s %u%s is already in tenant '%s' (line %u)",
				   k->name, what, ids[n], named, other->name,
				   other->line);
			goto out_free;
		}
		n++;
	}
	if (group) {
		t->gids = ids;
		t->nr_gids = n;
	} else {
		t->uids = ids;
		t->nr_uids = n;
	}
	return 0;
out_free:
	free(ids);
	return ret;
}

/* A string of 16..64 bytes, or hex: and 32..128 hex digits. */
static int set_secret(struct conf_ctx *c, const struct conf_key *k,
		      const char *val, void *dst)
{
	struct parser *p = (struct parser *)c;
	struct kvd_tenant_conf *t = dst;
	size_t len = strlen(val);

	if (!strncmp(val, "hex:", 4)) {
		const char *hex = val + 4;
		size_t digits = len - 4;

		for (size_t i = 0; i < digits; i++)
			if (hex_val(hex[i]) < 0)
				return perr(p, "%s: 'hex:' must be followed by hex digits only",
					    k->name);
		if (digits % 2)
			return perr(p, "%s: 'hex:' must be followed by an even number of hex digits (%zu given)",
				    k->name, digits);
		len = digits / 2;
		if (len < KVD_CONF_SECRET_MIN || len > KVD_CONF_SECRET_MAX)
			return perr(p, "%s: %zu bytes of hex; it must give %d to %d bytes (%d to %d hex digits)",
				    k->name, len, KVD_CONF_SECRET_MIN,
				    KVD_CONF_SECRET_MAX,
				    2 * KVD_CONF_SECRET_MIN,
				    2 * KVD_CONF_SECRET_MAX);
		for (size_t i = 0; i < len; i++)
			t->secret[i] = (uint8_t)(hex_val(hex[2 * i]) << 4 |
						 hex_val(hex[2 * i + 1]));
	} else {
		if (len < KVD_CONF_SECRET_MIN || len > KVD_CONF_SECRET_MAX)
			return perr(p, "%s: %zu bytes; it must be %d to %d bytes (or hex:HEXDIGITS)",
				    k->name, len, KVD_CONF_SECRET_MIN,
				    KVD_CONF_SECRET_MAX);
		memcpy(t->secret, val, len);
	}
	t->secret_len = (uint32_t)len;
	return 0;
}

/* ---- the keys of sections (global keys: config.c) -------------------- */

#define PAGES(type, f) { .name = #f, .set = conf_set_u32,			\
	.off = offsetof(type, f), .min = 0, .max = UINT32_MAX }

static const struct conf_key tenant_keys[] = {
	{ .name = "uids", .set = set_ids },
	{ .name = "gids", .set = set_ids },
	{ .name = "secret", .set = set_secret },
	PAGES(struct kvd_tenant_conf, min_pages),
	PAGES(struct kvd_tenant_conf, max_pages),
};

static const struct conf_key namespace_keys[] = {
	PAGES(struct kvd_quota_conf, min_pages),
	PAGES(struct kvd_quota_conf, max_pages),
	{ .name = "max_context", .set = conf_set_max_context,
	  .off = offsetof(struct kvd_quota_conf, max_context),
	  .max = KVD_CONF_CONTEXT_MAX },
	{ .name = "context_policy", .set = conf_set_ctx_policy,
	  .off = offsetof(struct kvd_quota_conf, ctx_default) },
	{ .name = "context_policies", .set = conf_set_ctx_kinds,
	  .off = offsetof(struct kvd_quota_conf, ctx_refused) },
};

_Static_assert(ARRAY_SIZE(tenant_keys) <= NR_KEYS_MAX, "set_on[] too short");
_Static_assert(ARRAY_SIZE(namespace_keys) <= NR_KEYS_MAX, "set_on[] too short");

static const struct conf_key *find_key(const struct conf_key *keys, size_t nr,
				       const char *name)
{
	for (size_t i = 0; i < nr; i++)
		if (keys[i].name && !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* ---- sections --------------------------------------------------------- */

static void enter_section(struct parser *p, enum conf_section sect,
			  const struct conf_key *keys, size_t nr_keys)
{
	p->sect = sect;
	p->sect_line = p->c.line;
	p->keys = keys;
	p->nr_keys = nr_keys;
	memset(p->set_on, 0, sizeof(p->set_on));
}

static int check_pages(struct parser *p, uint32_t min, uint32_t max)
{
	unsigned lmin = key_line(p, "min_pages"), lmax = key_line(p, "max_pages");

	if (max && min > max)
		return perr_at(p, lmin > lmax ? lmin : lmax,
			       "min_pages %u is more than max_pages %u in %s",
			       min, max, p->where);
	return 0;
}

static unsigned later(unsigned a, unsigned b)
{
	return a > b ? a : b;
}

/*
 * The namespace's default policy against its max_context and its
 * context_policies. A fault of the policy alone names its line; one it
 * has only with this max_context (sinks + window above it), the later
 * of the two keys.
 */
static int check_ctx(struct parser *p, const struct kvd_quota_conf *q)
{
	const struct kv_ctx_policy *pol = &q->ctx_default;
	unsigned lp = key_line(p, "context_policy");
	unsigned lm = key_line(p, "max_context");
	unsigned lk = key_line(p, "context_policies");
	const char *why = "";
	char sum[64] = "";

	if (kv_ctx_policy_check(pol, q->max_context, &why)) {
		if (!q->max_context || kv_ctx_policy_check(pol, 0, NULL))
			return perr_at(p, lp, "context_policy: %s", why);
		conf_ctx_sum(pol, q->max_context, sum, sizeof(sum));
		return perr_at(p, later(lp, lm), "context_policy: %s%s", why,
			       sum);
	}
	if (q->ctx_refused >> pol->kind & 1)
		return perr_at(p, later(lp, lk),
			       "context_policy: %s is not in context_policies of %s",
			       conf_ctx_kind(pol->kind), p->where);
	return 0;
}

/* Checks that need the whole section, when it ends. */
static int section_end(struct parser *p)
{
	const struct kvd_conf *conf = p->c.conf;
	const struct kvd_tenant_conf *t;
	const struct kvd_quota_conf *q;
	unsigned ls, la;
	int ret;

	switch (p->sect) {
	case SECT_GLOBAL:
		ls = key_line(p, "socket");
		la = key_line(p, "admin_socket");
		if (ls && la && !strcmp(conf->socket, conf->admin_socket))
			return perr_at(p, later(ls, la),
				       "admin_socket must differ from socket");
		return 0;
	case SECT_TENANT:
		t = sect_base(p);
		if (!t->secret_len)
			return perr_at(p, p->sect_line,
				       "tenant '%s' has no secret", t->name);
		if (!t->nr_uids && !t->nr_gids)
			return perr_at(p, p->sect_line,
				       "tenant '%s' has neither uids nor gids",
				       t->name);
		return check_pages(p, t->min_pages, t->max_pages);
	case SECT_NAMESPACE:
		q = sect_base(p);
		ret = check_pages(p, q->min_pages, q->max_pages);
		return ret ? ret : check_ctx(p, q);
	}
	return 0;
}

static int grow(struct parser *p, void **arr, uint32_t nr, uint32_t *cap,
		size_t size)
{
	uint32_t ncap = *cap ? *cap * 2 : 4;
	void *n;

	if (nr < *cap)
		return 0;
	/* Not realloc: the old array (tenants' secrets) is zeroed first. */
	n = calloc(ncap, size);
	if (!n)
		return conf_err_nomem(&p->c);
	if (*arr) {
		memcpy(n, *arr, (size_t)*cap * size);
		explicit_bzero(*arr, (size_t)*cap * size);
		free(*arr);
	}
	*arr = n;
	*cap = ncap;
	return 0;
}

/* 1..31 letters, digits, '.', '_' or '-'. */
static bool tenant_name_ok(const char *s, size_t len)
{
	if (!len || len >= KVD_CONF_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (!conf_is_digit(c) && !(c >= 'a' && c <= 'z') &&
		    !(c >= 'A' && c <= 'Z') && c != '.' && c != '_' && c != '-')
			return false;
	}
	return true;
}

static int tenant_begin(struct parser *p, const char *name)
{
	struct kvd_conf *conf = p->c.conf;
	struct kvd_tenant_conf *t;
	int ret;

	if (!tenant_name_ok(name, strlen(name)))
		return perr(p, "malformed section header: tenant name '%s' is not 1 to %d letters, digits, '.', '_' or '-'",
			    name, KVD_CONF_NAME_MAX - 1);
	for (uint32_t i = 0; i < conf->nr_tenants; i++)
		if (!strcmp(conf->tenants[i].name, name))
			return perr(p, "duplicate tenant '%s' (first defined on line %u)",
				    name, conf->tenants[i].line);
	if (conf->nr_tenants == KVD_CONF_TENANTS_MAX)
		return perr(p, "too many tenants (at most %d)",
			    KVD_CONF_TENANTS_MAX);
	ret = grow(p, (void **)&conf->tenants, conf->nr_tenants,
		   &p->cap_tenants, sizeof(*conf->tenants));
	if (ret)
		return ret;
	t = &conf->tenants[conf->nr_tenants++];
	strcpy(t->name, name);
	t->line = p->c.line;
	enter_section(p, SECT_TENANT, tenant_keys, ARRAY_SIZE(tenant_keys));
	snprintf(p->where, sizeof(p->where), "[tenant %s]", name);
	return 0;
}

/* TENANT/MODEL: the tenant runs to the first '/', the model id may hold more. */
static int namespace_begin(struct parser *p, const char *arg)
{
	struct kvd_conf *conf = p->c.conf;
	const char *slash = strchr(arg, '/'), *model;
	struct kvd_quota_conf *q;
	size_t tlen, mlen;
	int ret;

	if (!slash)
		return perr(p, "malformed section header: '%s' is not TENANT/MODEL",
			    arg);
	tlen = (size_t)(slash - arg);
	model = slash + 1;
	mlen = strlen(model);
	if (!tenant_name_ok(arg, tlen))
		return perr(p, "malformed section header: tenant name '%.*s' is not 1 to %d letters, digits, '.', '_' or '-'",
			    (int)tlen, arg, KVD_CONF_NAME_MAX - 1);
	if (!mlen || mlen >= KVD_CONF_MODEL_MAX)
		return perr(p, "malformed section header: model id of %zu bytes (1 to %d)",
			    mlen, KVD_CONF_MODEL_MAX - 1);
	for (size_t i = 0; i < mlen; i++)
		if (model[i] < 0x21 || model[i] > 0x7e)
			return perr(p, "malformed section header: model id '%s' is not printable ASCII without spaces",
				    model);
	for (uint32_t i = 0; i < conf->nr_quotas; i++) {
		q = &conf->quotas[i];
		if (!strncmp(q->tenant, arg, tlen) && !q->tenant[tlen] &&
		    !strcmp(q->model_id, model))
			return perr(p, "duplicate namespace '%s' (first defined on line %u)",
				    arg, q->line);
	}
	ret = grow(p, (void **)&conf->quotas, conf->nr_quotas, &p->cap_quotas,
		   sizeof(*conf->quotas));
	if (ret)
		return ret;
	q = &conf->quotas[conf->nr_quotas++];
	memcpy(q->tenant, arg, tlen);
	memcpy(q->model_id, model, mlen + 1);
	q->line = p->c.line;
	enter_section(p, SECT_NAMESPACE, namespace_keys,
		      ARRAY_SIZE(namespace_keys));
	snprintf(p->where, sizeof(p->where), "[namespace %s]", arg);
	return 0;
}

/*
 * "[KIND ARG]": the header ends at the first ']' followed by nothing but
 * blanks or a comment, so a model id may hold '#' or ']'.
 */
static int parse_section(struct parser *p, char *s)
{
	char hdr[KVD_CONF_LINE_MAX + 1], *close, *rest, *kind, *arg, *end;
	int ret;

	for (close = strchr(s, ']'); close; close = strchr(close + 1, ']')) {
		rest = skip_blanks(close + 1);
		if (!*rest || *rest == '#')
			break;
	}
	if (!close)
		return perr(p, "malformed section header (expected [tenant NAME] or [namespace TENANT/MODEL])");
	*close = 0;
	strcpy(hdr, s);
	kind = skip_blanks(s + 1);
	end = kind + strcspn(kind, " \t");
	arg = skip_blanks(end);
	*end = 0;
	end = arg + strcspn(arg, " \t");
	if (*skip_blanks(end) || !*arg)
		return perr(p, "malformed section header '%s]' (expected [tenant NAME] or [namespace TENANT/MODEL])",
			    hdr);
	*end = 0;
	if (strcmp(kind, "tenant") && strcmp(kind, "namespace"))
		return perr(p, "malformed section header: unknown section '%s' (expected [tenant NAME] or [namespace TENANT/MODEL])",
			    kind);
	ret = section_end(p);
	if (ret)
		return ret;
	if (!strcmp(kind, "tenant"))
		return tenant_begin(p, arg);
	return namespace_begin(p, arg);
}

/* ---- key = value ------------------------------------------------------ */

/* The value after '=': quoted ("..." with \" and \\) or bare to '#'. */
static int parse_value(struct parser *p, const char *key, char *s, char *val)
{
	char *o = val;

	if (*s == '"') {
		for (s++; *s && *s != '"'; s++) {
			if (*s == '\\' && (s[1] == '"' || s[1] == '\\'))
				s++;
			*o++ = *s;
		}
		if (*s != '"')
			return perr(p, "%s: unterminated quoted value", key);
		s = skip_blanks(s + 1);
		if (*s && *s != '#')
			return perr(p, "%s: unexpected text after the quoted value",
				    key);
		*o = 0;
		return 0;
	}
	for (; *s && *s != '#'; s++) {
		if (*s == '"')
			return perr(p, "%s: stray '\"' in the value (quote the whole value)",
				    key);
		*o++ = *s;
	}
	while (o > val && is_blank(o[-1]))
		o--;
	*o = 0;
	if (o == val)
		return perr(p, "%s: no value", key);
	return 0;
}

static bool is_key_char(char c)
{
	return conf_is_digit(c) || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

static const char *key_hint(const struct parser *p, const char *name)
{
	if (p->sect != SECT_GLOBAL &&
	    find_key(kvd_keys, KVD_NR_KEYS, name))
		return " (global keys go before the first section)";
	if (p->sect != SECT_TENANT &&
	    find_key(tenant_keys, ARRAY_SIZE(tenant_keys), name))
		return " (it belongs in a [tenant NAME] section)";
	if (p->sect != SECT_NAMESPACE &&
	    find_key(namespace_keys, ARRAY_SIZE(namespace_keys), name))
		return " (it belongs in a [namespace TENANT/MODEL] section)";
	return "";
}

static int parse_assignment(struct parser *p, char *s)
{
	char key[KVD_CONF_LINE_MAX + 1], val[KVD_CONF_LINE_MAX + 1];
	const struct conf_key *k;
	size_t len = 0, i;
	int ret;

	while (is_key_char(s[len]))
		len++;
	if (!len)
		return perr(p, "expected 'key = value' or a [section] header");
	memcpy(key, s, len);
	key[len] = 0;
	s = skip_blanks(s + len);
	if (*s != '=')
		return perr(p, "expected '=' after '%s'", key);
	k = find_key(p->keys, p->nr_keys, key);
	if (!k)
		return perr(p, "unknown key '%s' in %s%s", key, p->where,
			    key_hint(p, key));
	i = (size_t)(k - p->keys);
	if (p->set_on[i])
		return perr(p, "duplicate key '%s' in %s (first set on line %u)",
			    key, p->where, p->set_on[i]);
	ret = parse_value(p, key, skip_blanks(s + 1), val);
	if (!ret) {
		p->c.name = key;
		ret = k->set(&p->c, k, val, (char *)sect_base(p) + k->off);
	}
	explicit_bzero(val, sizeof(val));	/* it may be a secret */
	if (ret)
		return ret;
	p->set_on[i] = p->c.line;
	if (k->has)
		*(bool *)((char *)p->c.conf + k->has) = true;
	return 0;
}

/* After a CR: is it the end of the line (LF or the file's end)? */
static bool crlf_ends(FILE *f)
{
	int d = getc(f);

	if (d == '\n' || d == EOF)
		return true;
	ungetc(d, f);
	return false;
}

/*
 * Reads the next line into @buf (KVD_CONF_LINE_MAX + 1 bytes), without
 * its newline (or CR LF). Returns 1, 0 at the end of the file, or an
 * error: a line too long, a control character, a read error.
 */
static int read_line(struct parser *p, FILE *f, char *buf)
{
	char eb[64];
	size_t n = 0;
	int c;

	errno = 0;
	while ((c = getc(f)) != EOF && c != '\n') {
		if (n == KVD_CONF_LINE_MAX) {
			if (c == '\r' && crlf_ends(f))
				break;	/* a full line's CR LF */
			p->c.line++;
			return perr(p, "line too long (more than %d bytes)",
				    KVD_CONF_LINE_MAX);
		}
		buf[n++] = (char)c;
	}
	if (c == EOF && ferror(f)) {
		int e = errno ? errno : EIO;

		snprintf(p->c.err, p->c.errlen, "%s: %s", p->c.path,
			 strerror_r(e, eb, sizeof(eb)));
		return -e;
	}
	if (c == EOF && !n)
		return 0;
	p->c.line++;
	if (n && buf[n - 1] == '\r')
		n--;
	for (size_t i = 0; i < n; i++) {
		unsigned char u = (unsigned char)buf[i];

		if ((u < 0x20 && u != '\t') || u == 0x7f)
			return perr(p, "control character 0x%02x in the line",
				    u);
	}
	buf[n] = 0;
	return 1;
}

static int parse_line(struct parser *p, char *s)
{
	s = skip_blanks(s);
	if (!*s || *s == '#')
		return 0;
	if (*s == '[')
		return parse_section(p, s);
	return parse_assignment(p, s);
}

/* Checks that need the whole file. */
static int file_end(struct parser *p)
{
	const struct kvd_conf *conf = p->c.conf;
	int ret = section_end(p);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < conf->nr_quotas; i++) {
		const struct kvd_quota_conf *q = &conf->quotas[i];
		bool found = false;

		for (uint32_t j = 0; j < conf->nr_tenants && !found; j++)
			found = !strcmp(conf->tenants[j].name, q->tenant);
		if (!found)
			return perr_at(p, q->line,
				       "namespace '%s/%s' names unknown tenant '%s'",
				       q->tenant, q->model_id, q->tenant);
	}
	return 0;
}

/*
 * Opens @path for reading if it is a file or a character device (as
 * /dev/null, an empty configuration): 0, -EISDIR, -EINVAL (a FIFO, a
 * socket, a block device), or another -errno. Opened and read
 * non-blocking, so no file can hold kvd in open() or read() (a reload
 * runs on the event loop): a FIFO there blocked it until written to.
 */
static int open_regular(const char *path, FILE **fp)
{
	struct stat st;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return errno ? -errno : -EIO;
	if (fstat(fd, &st)) {
		ret = -errno;
		goto out_close;
	}
	ret = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
		goto out_close;
	*fp = fdopen(fd, "r");
	if (*fp)
		return 0;
	ret = -errno;
out_close:
	close(fd);
	return ret;
}

int kvd_conf_load(const char *path, struct kvd_conf *conf, char *err,
		  size_t errlen)
{
	struct parser p = {
		.c = { .path = path, .err = err, .errlen = errlen,
		       .conf = conf },
		.where = "global section",
	};
	char buf[KVD_CONF_LINE_MAX + 1], eb[64], iobuf[BUFSIZ];
	FILE *f;
	int ret;

	memset(conf, 0, sizeof(*conf));
	if (errlen)
		err[0] = 0;
	ret = open_regular(path, &f);
	if (ret) {
		if (errlen && ret == -EINVAL)
			snprintf(err, errlen, "%s: not a file", path);
		else if (errlen)
			snprintf(err, errlen, "%s: %s", path,
				 strerror_r(-ret, eb, sizeof(eb)));
		return ret;
	}
	/* stdio's buffer on the stack, zeroed with the line: secrets */
	setvbuf(f, iobuf, _IOFBF, sizeof(iobuf));
	enter_section(&p, SECT_GLOBAL, kvd_keys, KVD_NR_KEYS);
	while ((ret = read_line(&p, f, buf)) > 0) {
		ret = parse_line(&p, buf);
		if (ret)
			break;
	}
	if (!ret)
		ret = file_end(&p);
	fclose(f);
	explicit_bzero(iobuf, sizeof(iobuf));
	explicit_bzero(buf, sizeof(buf));
	if (ret)
		kvd_conf_free(conf);
	return ret;
}

void kvd_conf_free(struct kvd_conf *conf)
{
	if (!conf)
		return;
	for (uint32_t i = 0; i < conf->nr_tenants; i++) {
		free(conf->tenants[i].uids);
		free(conf->tenants[i].gids);
	}
	if (conf->tenants)
		explicit_bzero(conf->tenants,
			       conf->nr_tenants * sizeof(*conf->tenants));
	free(conf->tenants);
	free(conf->quotas);
	memset(conf, 0, sizeof(*conf));
}

static bool has_id(const uint32_t *ids, uint32_t nr, uint32_t id)
{
	for (uint32_t i = 0; i < nr; i++)
		if (ids[i] == id)
			return true;
	return false;
}

const struct kvd_tenant_conf *kvd_conf_tenant_of(const struct kvd_conf *conf,
						 uint32_t uid, uint32_t gid,
						 const uint32_t *groups,
						 uint32_t nr_groups)
{
	const struct kvd_tenant_conf *t;
	uint32_t i, j;

	for (i = 0; i < conf->nr_tenants; i++) {
		t = &conf->tenants[i];
		if (has_id(t->uids, t->nr_uids, uid))
			return t;
	}
	for (i = 0; i < conf->nr_tenants; i++) {
		t = &conf->tenants[i];
		if (has_id(t->gids, t->nr_gids, gid))
			return t;
	}
	for (i = 0; i < conf->nr_tenants; i++) {
		t = &conf->tenants[i];
		for (j = 0; j < nr_groups; j++)
			if (has_id(t->gids, t->nr_gids, groups[j]))
				return t;
	}
	return NULL;
}

const struct kvd_quota_conf *kvd_conf_quota(const struct kvd_conf *conf,
					    const char *tenant,
					    const char *model_id)
{
	for (uint32_t i = 0; i < conf->nr_quotas; i++) {
		const struct kvd_quota_conf *q = &conf->quotas[i];

		if (!strcmp(q->tenant, tenant) && !strcmp(q->model_id, model_id))
			return q;
	}
	return NULL;
}
