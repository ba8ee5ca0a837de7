#!/bin/sh
# SPDX-License-Identifier: MIT
# The layers call one way: among the objects of each part (kvd/,
# libkvclient/, kernels/, tools/ with kvbench/), no file calls a function
# or uses a variable defined in a file that calls back into it, directly
# or round a longer circle. The edges come from the symbols each object
# takes from another (nm: undefined here, defined there); tsort(1) finds
# any circle. Usage: tests/layering-check.sh BUILD_DIR
set -eu
O=${1:-build}
status=0

# check NAME OBJECT...: the objects of one part.
check() {
	name=$1
	shift
	for o in "$@"; do
		[ -f "$o" ] || { echo "layering: $o: not built" >&2; exit 1; }
	done
	edges=$(for o in "$@"; do
		nm -P --defined-only "$o" | awk -v f="$o" '$2 ~ /^[TDBRCVW]$/ { print "D", f, $1 }'
		nm -P --undefined-only "$o" | awk -v f="$o" '{ print "U", f, $1 }'
	done | awk '
		$1 == "D" { def[$3] = $2; next }
		{ use[++n] = $2 " " $3 }
		END {
			for (i = 1; i <= n; i++) {
				split(use[i], u, " ")
				if ((u[2] in def) && def[u[2]] != u[1])
					print u[1], def[u[2]]
			}
		}' | sort -u)
	# every object a node, so tsort sees the lone ones too
	nodes=$(for o in "$@"; do echo "$o $o"; done)
	if ! printf '%s\n%s\n' "$nodes" "$edges" | sed '/^$/d' | tsort >/dev/null 2>"$O/.layering.err"; then
		echo "layering: $name: a circle of calls:" >&2
		sed 's/^/  /' "$O/.layering.err" >&2
		status=1
	else
		echo "  LAYERS  $name: $# files, $(printf '%s\n' "$edges" | sed '/^$/d' | wc -l) calls between them, no circle"
	fi
}

# objs DIR SRC...: the objects the sources build to (not whatever lies
# in the build folder: a file removed from the tree leaves its object).
objs() {
	d=$1
	shift
	for f in "$@"; do echo "$O/$d/${f%.c}.o"; done
}

check kvd $(objs obj kvd/*.c)
check libkvclient $(objs pic libkvclient/*.c)
check kernels $(objs pic kernels/*.c)
check tools $(objs obj tools/*.c tools/kvbench/*.c)
exit $status
