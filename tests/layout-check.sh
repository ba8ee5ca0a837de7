#!/bin/sh
# SPDX-License-Identifier: MIT
# README's Layout names every source file of the tree: each .c, .h, .cu,
# .map, .sh and .py of include/, kvd/, libkvclient/, kernels/, python/kvd/,
# tools/, scripts/ and tests/ itself appears there by name (a moved or new file must be
# said there). Run from the top of the tree.
set -eu
layout=$(sed -n '/^## Layout/,/^## /p' README.md)
[ -n "$layout" ] || { echo "layout: README.md has no Layout section" >&2; exit 1; }
missing=0
for f in include/kv/* kvd/* libkvclient/* kernels/* python/kvd/* tools/* \
	 tools/kvbench/* scripts/* tests/*.sh; do
	case $f in *.c|*.h|*.cu|*.map|*.sh|*.py) ;; *) continue ;; esac
	name=${f##*/}
	if ! printf '%s\n' "$layout" | grep -q "\(^\|[ (/]\)$name\([ ),]\|$\)"; then
		echo "layout: $f is not in README's Layout" >&2
		missing=$((missing + 1))
	fi
done
[ "$missing" -eq 0 ] || exit 1
echo "  LAYOUT  README names every source file"
