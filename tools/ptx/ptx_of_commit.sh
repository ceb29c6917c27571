#!/usr/bin/env bash
# PTX of one CUDA source file as committed at COMMIT, with the cuda-release build's code
# flags (sm_90a, -O3, NDEBUG; no line info, so no .loc lines to normalize):
#   tools/ptx/ptx_of_commit.sh COMMIT src/ops/attention/flash_attention_backward_cuda.cu OUT.ptx
# Compare kernels of two such files with tools/ptx/ptx_kernel_diff.py. Needs nvcc, no GPU.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 COMMIT SOURCE.cu OUT.ptx" >&2; exit 2; }
commit=$1 source=$2 out=$(realpath -m "$3")
root=$(git rev-parse --show-toplevel)
tree=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git -C "$root" worktree add -q --detach "$tree" "$commit"
"${NVCC:-nvcc}" -DMICROLLM_WITH_CUDA=1 -DMICROLLM_WITH_NCCL=1 -I"$tree/include" -O3 -DNDEBUG \
  -arch=sm_90a --expt-relaxed-constexpr -std=c++20 -x cu --ptx "$tree/$source" -o "$out"
echo "ptx_of_commit: $(git -C "$root" rev-parse --short "$commit") $source -> $out"
