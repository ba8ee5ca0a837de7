#!/bin/sh
# SPDX-License-Identifier: MIT
# man-check.sh LIB...: every kv_ symbol each LIB exports has man/man3/SYMBOL.3,
# and every man/man*/*.[1-8] page lints clean under mandoc -Tlint -Wwarning
# with a .TH title and section that match its file name.
# Prints one summary line; exits 1 with a list of problems otherwise.
set -u

if [ $# -lt 1 ]; then
	echo "usage: sh tests/man-check.sh LIBPATH..." >&2
	exit 2
fi
# Absolute paths, as the script runs from the top of the tree.
n=$#
for lib in "$@"; do
	case $lib in
	/*) ;;
	*) lib=$PWD/$lib ;;
	esac
	set -- "$@" "$lib"
done
shift "$n"
cd "$(dirname "$0")/.." || exit 1

for tool in nm mandoc; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "man-check: $tool not found (install binutils and mandoc)" >&2
		exit 1
	fi
done
for lib in "$@"; do
	if [ ! -r "$lib" ]; then
		echo "man-check: cannot read $lib" >&2
		exit 1
	fi
done

problems=$(mktemp) || exit 1
symbols=$(mktemp) || { rm -f "$problems"; exit 1; }
trap 'rm -f "$problems" "$symbols" "$symbols.kv"' EXIT
trap 'exit 1' HUP INT TERM

# Defined, exported functions (T) and weak symbols (W), version suffix cut.
nsym=0
for lib in "$@"; do
	if ! nm -D --defined-only "$lib" >"$symbols"; then
		echo "nm -D failed on $lib" >>"$problems"
	fi
	awk '$2 ~ /[TW]/ {print $3}' "$symbols" | sed 's/@.*//' | grep '^kv_' |
		sort -u >"$symbols.kv"
	n=0
	while read -r sym; do
		n=$((n + 1))
		[ -f "man/man3/$sym.3" ] ||
			echo "$sym: exported by $(basename "$lib") but man/man3/$sym.3 is missing" >>"$problems"
	done <"$symbols.kv"
	[ "$n" -gt 0 ] ||
		echo "no kv_ symbol exported by $lib" >>"$problems"
	nsym=$((nsym + n))
done

npages=0
for page in man/man*/*.[1-8]; do
	[ -e "$page" ] || continue
	npages=$((npages + 1))
	out=$(mandoc -Tlint -Wwarning "$page" 2>&1)
	rc=$?
	if [ -n "$out" ] || [ $rc -ne 0 ]; then
		echo "$page: mandoc -Tlint -Wwarning (exit $rc):" >>"$problems"
		printf '%s\n' "${out:-(no output)}" | sed 's/^/    /' >>"$problems"
	fi
	# .TH must name the page as its file does: "name section".
	name=$(basename "$page")
	want="${name%.*} ${name##*.}"
	got=$(sed -n 's/^\.TH[ 	]\{1,\}\([^ 	]*\)[ 	]\{1,\}\([^ 	]*\).*/\1 \2/p' "$page" |
	      head -n 1)
	[ "$got" = "$want" ] ||
		echo "$page: .TH says '${got:-nothing}', expected '$want'" >>"$problems"
done
[ "$npages" -gt 0 ] || echo "no man page under man/" >>"$problems"

if [ -s "$problems" ]; then
	echo "man-check: FAILED:" >&2
	cat "$problems" >&2
	exit 1
fi
echo "man-check: $nsym symbols documented, $npages pages lint clean"
exit 0
