#!/usr/bin/env bash
# The format gate: every tracked C++/CUDA file is clang-format clean (.clang-format at the
# root, clang-format 14 from Debian). Exits non-zero and names each file that is not.
# `bash scripts/check_format.sh --fix` rewrites them in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
formatter=${CLANG_FORMAT:-clang-format-14}
command -v "$formatter" >/dev/null || formatter=clang-format
command -v "$formatter" >/dev/null || { echo "check_format: clang-format not found (apt-get install clang-format-14)" >&2; exit 2; }
mapfile -t files < <(git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp' '*.cc')
if [ "${1:-}" = "--fix" ]; then
  "$formatter" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} files are not clang-format clean ($("$formatter" --version)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: bash scripts/check_format.sh --fix" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files clang-format clean"
