#!/bin/sh
# SPDX-License-Identifier: MIT
# Every GPU-side check, for a machine with a CUDA device: build, then run
# each check against its C reference. A few minutes at most.
set -eu
cd "$(dirname "$0")/../.."
make -j"$(nproc)" kernels
O=${O:-build}
"$O"/tests/gpu/copy_blocks_check
