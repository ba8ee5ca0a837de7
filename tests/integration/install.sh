#!/bin/sh
# SPDX-License-Identifier: MIT
# make install and make uninstall: `make install DESTDIR=T PREFIX=/usr`
# of the already-built tree puts every file where it belongs; a client
# built out of the tree with nothing but pkg-config's kvclient flags
# compiles, links (shared, and static with --static) and runs (a
# kv_connect to a socket that does not exist: -ENOENT); the
# installed unit passes systemd-analyze verify (its ExecStart pointed at
# the installed kvd: man pages not looked up); then make uninstall leaves
# no file behind. Only copies: install's `all` is up to date when this
# runs, so the build directory other tests use is not touched.
# Exit 0 pass, 1 fail, 77 skip (no pkg-config, no cc).
# usage: sh tests/integration/install.sh BUILD_DIR
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
. "$ROOT/tests/integration/kvd_test.shlib"

command -v pkg-config >/dev/null 2>&1 || skip "pkg-config not installed"
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || skip "no C compiler ($CC)"
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
for f in kvd kvctl kvbench libkvclient.so libkvclient.a; do
	[ -e "$BUILD/$f" ] || fail "$BUILD/$f not built"
done

test_dir install
T=$DIR/root
# A make of our own, not a job of the make that runs the tests.
unset MAKEFLAGS MFLAGS MAKELEVEL
mk() {
	make -s -C "$ROOT" O="$BUILD" DESTDIR="$T" PREFIX=/usr "$@" \
		>"$DIR/make.log" 2>&1 || { cat "$DIR/make.log"; fail "make $*"; }
}

mk install
major=$(cut -d. -f1 "$ROOT/VERSION")
for f in sbin/kvd bin/kvctl bin/kvbench lib/libkvclient.so.$major \
	 lib/libkvclient.a lib/pkgconfig/kvclient.pc include/kv/kv.h \
	 include/kv/abi.h share/man/man3/kv_connect.3 \
	 share/man/man5/kvd.conf.5 share/man/man7/kv_prefix_cache.7 \
	 share/man/man8/kvd.8 share/doc/kvd/kvd.conf.example \
	 lib/systemd/system/kvd.service lib/sysusers.d/kvd.conf; do
	[ -e "$T/usr/$f" ] || fail "/usr/$f not installed"
done
[ -x "$T/usr/sbin/kvd" ] || fail "/usr/sbin/kvd not executable"
[ "$(readlink "$T/usr/lib/libkvclient.so")" = "libkvclient.so.$major" ] ||
	fail "libkvclient.so does not point at libkvclient.so.$major"
readelf -d "$T/usr/lib/libkvclient.so.$major" |
	grep -q "SONAME.*\[libkvclient.so.$major\]" || fail "no soname"
grep -q '^ExecStart=/usr/sbin/kvd ' "$T/usr/lib/systemd/system/kvd.service" ||
	fail "kvd.service's ExecStart is not /usr/sbin/kvd"

export PKG_CONFIG_SYSROOT_DIR="$T" PKG_CONFIG_LIBDIR="$T/usr/lib/pkgconfig"
ver=$(pkg-config --modversion kvclient) || fail "pkg-config knows no kvclient"
[ "$ver" = "$(cat "$ROOT/VERSION")" ] || fail "kvclient.pc version $ver"
flags=$(pkg-config --cflags --libs kvclient) || fail "pkg-config --libs"
sflags=$(pkg-config --static --cflags --libs kvclient) || fail "pkg-config --static"
echo "pkg-config: $flags; --static: $sflags"

cat >"$DIR/client.c" <<'EOC'
#include <errno.h>
#include <stdio.h>
#include <kv/kv.h>

int main(int argc, char **argv)
{
	struct kv_connect_params p = {
		.socket_path = argv[1], .model_id = "install-test",
		.geom = { .layers = 1, .kv_heads = 1, .head_dim = 64,
			  .block_tokens = 16, .dtype = KV_DTYPE_FP16 },
	};
	struct kv_client *c = NULL;
	int ret = kv_connect(&p, &c);

	printf("kv_connect: %d\n", ret);
	return ret == -ENOENT && !c ? 0 : 1;
}
EOC
# shellcheck disable=SC2086 # flags are several words
"$CC" -o "$DIR/client" "$DIR/client.c" $flags || fail "shared link"
# shellcheck disable=SC2086
"$CC" -o "$DIR/client-static" "$DIR/client.c" \
	$(echo "$sflags" | sed 's/-lkvclient/-l:libkvclient.a/') ||
	fail "static link"
LD_LIBRARY_PATH="$T/usr/lib" "$DIR/client" "$DIR/none.sock" ||
	fail "the shared client did not get -ENOENT"
ldd "$DIR/client-static" | grep -q libkvclient && fail "static client loads libkvclient"
"$DIR/client-static" "$DIR/none.sock" ||
	fail "the static client did not get -ENOENT"
LD_LIBRARY_PATH="$T/usr/lib" ldd "$DIR/client" | grep -q "$T/usr/lib/libkvclient.so.$major" ||
	fail "the client did not load the installed library"

if command -v systemd-analyze >/dev/null 2>&1; then
	sed "s|^ExecStart=/usr/sbin/kvd|ExecStart=$T/usr/sbin/kvd|" \
		"$T/usr/lib/systemd/system/kvd.service" >"$DIR/kvd.service"
	systemd-analyze verify --man=no "$DIR/kvd.service" ||
		fail "systemd-analyze verify kvd.service"
else
	echo "systemd-analyze not installed: unit not verified"
fi

mk uninstall
left=$(find "$T" ! -type d)
[ -z "$left" ] || fail "left after make uninstall: $left"
for d in include/kv share/doc/kvd; do
	[ ! -e "$T/usr/$d" ] || fail "/usr/$d left after make uninstall"
done
echo "PASS"
