/* SPDX-License-Identifier: MIT */
/*
 * Inside the configuration: a key of the table and the context its setter
 * reports into, shared by the table (config.c) and its two front-ends,
 * the kvd.conf parser (conf_parse.c) and the command line (options.c).
 * A setter checks one value and writes it to @dst; it never knows which
 * front-end called it, so a grammar, a range and a message exist once.
 */
#ifndef KVD_CONF_KEY_H
#define KVD_CONF_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "kvd.h"

struct conf_key;

/* Where a setter reports: "PATH:LINE: NAME: why", or "NAME: why". */
struct conf_ctx {
	char		*err;
	size_t		errlen;
	const char	*path;		/* kvd.conf; NULL: argv or environment */
	unsigned	line;		/* of the line being parsed */
	const char	*name;		/* the key or --option as written */
	struct kvd_conf	*conf;		/* the file so far; NULL for argv */
};

typedef int conf_set_fn(struct conf_ctx *c, const struct conf_key *k,
			const char *val, void *dst);

/* A value of an enumerated key, and what it is stored as. */
struct conf_enum {
	const char	*name;
	int		val;
};

/*
 * One key. A global key is a kvd.conf key when it has @name and a
 * command-line option when it has @opt; its value lives at @off in
 * struct kvd_conf (with its has_ flag at @has) and at @cfg_off in struct
 * kvd_config, @size bytes in both. Keys of [tenant] and [namespace]
 * sections use @name, @set, @off (in their section's struct) and the
 * range only.
 */
struct conf_key {
	const char	*name;		/* in kvd.conf; NULL: command line only */
	const char	*opt;		/* --opt; NULL: kvd.conf only */
	char		short_opt;	/* -x, or 0 */
	const char	*arg;		/* the value in --help; NULL: no value */
	const char	*help;		/* --help text, lines split by \n */
	const char	*env;		/* default from this variable, if set */
	conf_set_fn	*set;		/* NULL: an action (--help, --version) */
	size_t		off, has, cfg_off, size;
	uint64_t	min, max;	/* range, where the setter uses one */
	int64_t		def;		/* default when nothing sets the key */
	const char	*what;		/* noun for messages ("device ordinal") */
	const struct conf_enum *values;	/* of an enum, NULL-terminated */
};

extern const struct conf_key kvd_keys[KVD_NR_KEYS];

/* The global key of kvd.conf called @name, or NULL. */
const struct conf_key *conf_global_key(const char *name);

__printf(2, 3) int conf_err(struct conf_ctx *c, const char *fmt, ...);
int conf_err_nomem(struct conf_ctx *c);

/* The user database: 0 found, 1 no such entry, -errno. */
enum conf_lookup { BY_USER_NAME, BY_UID, BY_GROUP_NAME };
int conf_lookup(enum conf_lookup how, const char *name, uint32_t uid,
		uint32_t *id, uint32_t *gid, char *pw_name, size_t namelen);
int conf_err_lookup(struct conf_ctx *c, const char *what, const char *name,
		    int ret);
bool conf_all_digits(const char *s);
/* The next token of a list: a run of anything but blanks and commas
 * from @s on (*@len its bytes), or NULL at the end. */
const char *conf_next_token(const char *s, size_t *len);

/* kvd/conf_ctx.c: the context keys of a [namespace] section */
conf_set_fn conf_set_max_context, conf_set_ctx_policy, conf_set_ctx_kinds;
/* " (4 + 4096 > 4096)": what @pol keeps against @max, into @buf. */
void conf_ctx_sum(const struct kv_ctx_policy *pol, uint32_t max, char *buf,
		  size_t len);
const char *conf_ctx_kind(uint32_t kind);
int conf_parse_id(const char *s, uint32_t *id);
int conf_parse_dec(const char *s, uint64_t max, uint64_t *out);
bool conf_is_digit(char c);

conf_set_fn conf_set_u32;

#endif /* KVD_CONF_KEY_H */
