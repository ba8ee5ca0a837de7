// SPDX-License-Identifier: MIT
/*
 * The command-line front-end of the key table (config.c): getopt_long's
 * options and kvd --help are built from the table, and each option's
 * value goes through its key's setter, as kvd.conf's does, straight
 * into struct kvd_config with its bit in argv_set. kvd_config_merge()
 * then fills every key the command line left out from kvd.conf, the
 * key's environment variable or its default: the command line wins.
 *
 * A reload (tenant.c) swaps struct kvd_conf and never merges again, so
 * what the command line gave, and every value the daemon sized itself
 * with, stays as it was at start.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf_key.h"

#ifndef KV_VERSION
#define KV_VERSION "0.0"
#endif

#define OPT_LONG	256	/* getopt_long's val for key i: OPT_LONG + i */
#define HELP_COL	25	/* where --help's text starts */

static void usage_key(FILE *f, const struct conf_key *k)
{
	char lhs[64];
	const char *h = k->help, *nl;
	int n;

	if (k->short_opt)
		n = snprintf(lhs, sizeof(lhs), "  -%c, --%s", k->short_opt,
			     k->opt);
	else
		n = snprintf(lhs, sizeof(lhs), "      --%s", k->opt);
	if (k->arg)
		n += snprintf(lhs + n, sizeof(lhs) - (size_t)n, " %s", k->arg);
	if (!h) {
		fprintf(f, "%s\n", lhs);
		return;
	}
	fprintf(f, "%-*s ", HELP_COL - 1, lhs);
	while ((nl = strchr(h, '\n'))) {
		fprintf(f, "%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
		h = nl + 1;
	}
	fprintf(f, "%s\n", h);
}

void kvd_config_usage(FILE *f)
{
	fprintf(f, "usage: kvd [options]\n");
	for (size_t i = 0; i < KVD_NR_KEYS; i++)
		if (kvd_keys[i].opt)
			usage_key(f, &kvd_keys[i]);
}

/* getopt_long's tables from the keys that are options. */
static void build_opts(struct option *opts, char *shorts)
{
	size_t n = 0, s = 0;

	shorts[s++] = ':';	/* a missing value: ':', not '?' */
	for (size_t i = 0; i < KVD_NR_KEYS; i++) {
		const struct conf_key *k = &kvd_keys[i];

		if (!k->opt)
			continue;
		opts[n++] = (struct option){
			.name = k->opt,
			.has_arg = k->arg ? required_argument : no_argument,
			.val = k->short_opt ? k->short_opt : OPT_LONG + (int)i,
		};
		if (k->short_opt) {
			shorts[s++] = k->short_opt;
			if (k->arg)
				shorts[s++] = ':';
		}
	}
	opts[n] = (struct option){ 0 };
	shorts[s] = 0;
}

/* The key getopt_long returned @o for, or NULL. */
static const struct conf_key *key_of(int o)
{
	if (o >= OPT_LONG && o < OPT_LONG + KVD_NR_KEYS)
		return &kvd_keys[o - OPT_LONG];
	for (size_t i = 0; i < KVD_NR_KEYS; i++)
		if (o && kvd_keys[i].short_opt == o)
			return &kvd_keys[i];
	return NULL;
}

/* --help and --version: answered here, then kvd exits 0. */
static int action(const struct conf_key *k)
{
	if (k == &kvd_keys[KVD_KEY_HELP]) {
		kvd_config_usage(stdout);
		return 1;
	}
	printf("kvd %s (ABI %u.%u)\n", KV_VERSION, KV_ABI_MAJOR,
	       KV_ABI_MINOR);
	return 1;
}

/* The option's name in messages: "--pool-size", whether -p or not. */
static const char *opt_name(const struct conf_key *k, char *buf, size_t len)
{
	snprintf(buf, len, "--%s", k->opt);
	return buf;
}

/*
 * getopt_long said '?' for @arg: a short option it does not know, a long
 * one that takes no value but was given one (optopt names it), or a long
 * one it does not know or that abbreviates several (optopt 0).
 */
static int bad_option(struct conf_ctx *c, const struct option *opts,
		      const char *arg)
{
	char list[256] = "";
	size_t len, n = 0, used = 0;

	if (strncmp(arg, "--", 2))
		return conf_err(c, "unknown option '-%c'", optopt);
	arg += 2;
	len = strcspn(arg, "=");
	if (optopt)
		return conf_err(c, "--%.*s takes no value", (int)len, arg);
	for (; opts->name; opts++) {
		if (strncmp(opts->name, arg, len))
			continue;
		n++;
		if (used < sizeof(list))
			used += snprintf(list + used, sizeof(list) - used,
					 "%s--%s", n > 1 ? ", " : "",
					 opts->name);
	}
	if (n > 1)
		return conf_err(c, "'--%.*s' is ambiguous: %s", (int)len, arg,
				list);
	return conf_err(c, "unknown option '--%.*s'", (int)len, arg);
}

int kvd_config_argv(struct kvd_config *cfg, int argc, char **argv,
		    char *err, size_t errlen)
{
	struct option opts[KVD_NR_KEYS + 1];
	char shorts[2 * KVD_NR_KEYS + 2], name[64];
	struct conf_ctx c = { .err = err, .errlen = errlen };
	const struct conf_key *k;
	int o, ret;

	if (errlen)
		err[0] = 0;
	build_opts(opts, shorts);
	optind = 0;		/* a fresh scan, each call */
	opterr = 0;
	while ((o = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
		if (o == '?')
			return bad_option(&c, opts, argv[optind - 1]);
		if (o == ':') {
			k = key_of(optopt);
			return conf_err(&c, "%s: no value",
					k ? opt_name(k, name, sizeof(name)) :
					argv[optind - 1]);
		}
		k = key_of(o);
		if (!k)
			return conf_err(&c, "unknown option '%s'",
					argv[optind - 1]);
		if (!k->set)
			return action(k);
		c.name = opt_name(k, name, sizeof(name));
		ret = k->set(&c, k, k->arg ? optarg : "yes",
			     (char *)cfg + k->cfg_off);
		if (ret)
			return ret;
		cfg->argv_set |= 1ULL << (k - kvd_keys);
	}
	if (optind < argc)
		return conf_err(&c, "unexpected argument '%s'", argv[optind]);
	return 0;
}

/* A default of 0 is all-zero bytes; others are integers of 1, 4 or 8. */
static void store_default(void *dst, const struct conf_key *k)
{
	if (!k->def) {
		memset(dst, 0, k->size);
		return;
	}
	switch (k->size) {
	case 1:
		*(uint8_t *)dst = (uint8_t)k->def;
		break;
	case 4:
		*(int32_t *)dst = (int32_t)k->def;
		break;
	default:
		*(int64_t *)dst = k->def;
		break;
	}
}

int kvd_config_merge(struct kvd_config *cfg, const struct kvd_conf *file,
		     char *err, size_t errlen)
{
	struct conf_ctx c = { .err = err, .errlen = errlen };
	const char *env;
	int ret;

	if (errlen)
		err[0] = 0;
	for (size_t i = 0; i < KVD_NR_KEYS; i++) {
		const struct conf_key *k = &kvd_keys[i];
		void *dst = (char *)cfg + k->cfg_off;
		uint64_t bit = 1ULL << i;

		if (!k->set)
			continue;
		if (cfg->argv_set & bit) {
			cfg->set |= bit;
		} else if (file && k->name &&
			   *(const bool *)((const char *)file + k->has)) {
			memcpy(dst, (const char *)file + k->off, k->size);
			cfg->set |= bit;
		} else if (k->env && (env = getenv(k->env)) && *env) {
			c.name = k->env;
			ret = k->set(&c, k, env, dst);
			if (ret)
				return ret;
			cfg->set |= bit;
		} else {
			store_default(dst, k);
		}
	}
	return 0;
}
