#!/usr/bin/env bash
# The layer gate: dependencies point down only (SPEC §3; INFERENCE.md "Layers and files").
# Greps every #include of src/<layer>/ and include/microllm/<layer>/ and names each one that
# reaches a layer the including layer must not see, as
#   file:line: <layer> must not include <header>
# then exits 1 (0 when there is none). A header counts as layer X when it is written
# "microllm/X/..." or, written relative to the including file, resolves into src/X/ or
# include/microllm/X/. Folders that do not exist yet (infer, serve) pass; their rules apply
# from their first file on.
#
#   bash scripts/check_layers.sh               check this tree
#   bash scripts/check_layers.sh --root DIR    check the tree at DIR
#   bash scripts/check_layers.sh --self-test   run the checker on small trees built in a
#                                              temporary folder (violations must fail)
set -euo pipefail

# <layer>: the layers it must not include. `cuda` (src/cuda, the CUDA runtime) sits beside
# core at the bottom.
RULES='
core     ops autograd model train io infer serve
cuda     ops autograd model train io infer serve
autograd ops model train io infer serve
ops      model train io infer serve
io       ops autograd model train infer serve
model    train infer serve
train    infer serve
infer    serve io
serve    ops cuda model
'
# <file> <header>: the allowed exceptions. The engine sums gradients that meet at a node with
# ops::add (docs/architecture.md, "autograd"); that is the one place autograd calls into ops.
EXCEPTIONS='
src/autograd/engine.cpp microllm/ops/elementwise.h
'

# Prints the violations under root $1 and returns 1 when there is any.
check_tree() {
  local root=$1 dirs=() layer
  for layer in $(awk 'NF { print $1 }' <<<"$RULES"); do
    [ -d "$root/src/$layer" ] && dirs+=("src/$layer")
    [ -d "$root/include/microllm/$layer" ] && dirs+=("include/microllm/$layer")
  done
  [ ${#dirs[@]} -gt 0 ] || return 0
  (cd "$root" &&
    { grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]+[">]' \
        --include='*.h' --include='*.hpp' --include='*.cuh' --include='*.cpp' --include='*.cc' \
        --include='*.cu' "${dirs[@]}" || true; } |
    awk -v rules="$RULES" -v exceptions="$EXCEPTIONS" '
      BEGIN {
        n = split(rules, lines, "\n")
        for (i = 1; i <= n; ++i) {
          k = split(lines[i], f, " ")
          for (j = 2; j <= k; ++j) forbidden[f[1], f[j]] = 1
        }
        n = split(exceptions, lines, "\n")
        for (i = 1; i <= n; ++i)
          if (split(lines[i], f, " ") == 2) allowed[f[1], f[2]] = 1
      }
      # The layer of a path relative to the root ("" when it is in none).
      function layer_of(path, parts) {
        split(path, parts, "/")
        if (parts[1] == "src" && parts[3] != "") return parts[2]
        if (parts[1] == "include" && parts[2] == "microllm" && parts[4] != "") return parts[3]
        return ""
      }
      # dir/rel with "." and ".." folded.
      function resolve(dir, rel, parts, out, n, m, i, path) {
        n = split(dir "/" rel, parts, "/")
        m = 0
        for (i = 1; i <= n; ++i) {
          if (parts[i] == "" || parts[i] == ".") continue
          if (parts[i] == ".." && m > 0) { --m; continue }
          out[++m] = parts[i]
        }
        path = ""
        for (i = 1; i <= m; ++i) path = path (i > 1 ? "/" : "") out[i]
        return path
      }
      {
        file = $0; sub(/:.*/, "", file)
        rest = substr($0, length(file) + 2)
        line = rest; sub(/:.*/, "", line)
        text = substr(rest, length(line) + 2)
        match(text, /["<][^">]+[">]/)
        header = substr(text, RSTART + 1, RLENGTH - 2)
        quoted = substr(text, RSTART, 1) == "\""
        from = layer_of(file)
        if (header ~ /^microllm\//) {
          split(header, h, "/")
          to = h[3] != "" ? h[2] : ""
        } else if (quoted) {
          dir = file; sub(/\/[^\/]*$/, "", dir)
          to = layer_of(resolve(dir, header))
        } else {
          to = ""
        }
        if (to != "" && (from, to) in forbidden && !((file, header) in allowed)) {
          print file ":" line ": " from " must not include " header
          ++bad
        }
      }
      END { exit bad > 0 ? 1 : 0 }' | LC_ALL=C sort -t: -k1,1 -k2,2n)
}

# Builds trees with and without violations and checks what the checker says about each.
self_test() {
  local tmp failures=0
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  put() { mkdir -p "$(dirname "$tmp/$1")" && printf '%s\n' "$2" >"$tmp/$1"; }
  expect() {  # expect <name> <exit status> <expected output>
    local out status=0
    out=$(check_tree "$tmp" 2>&1) || status=$?
    if [ "$status" != "$2" ] || [ "$out" != "$3" ]; then
      echo "self-test '$1': expected status $2 and output:" >&2
      printf '%s\n' "$3" >&2
      echo "found status $status and output:" >&2
      printf '%s\n' "$out" >&2
      failures=$((failures + 1))
    fi
  }
  # A clean tree: downward includes, the autograd exception, system headers, absent layers.
  put src/core/tensor.cpp $'#include "microllm/core/tensor.h"\n#include <vector>'
  put include/microllm/core/tensor.h '#include "microllm/core/shape.h"'
  put src/ops/add/add.cpp $'#include "../common.h"\n#include "microllm/autograd/node.h"'
  put src/ops/common.h '#include "microllm/core/tensor.h"'
  put src/autograd/engine.cpp '#include "microllm/ops/elementwise.h"'
  put src/model/transformer.cpp '#include "microllm/ops/ops.h"'
  expect clean 0 ''
  # Violations: a public header, an indented include, a relative path escaping the layer,
  # angle brackets, the exception header from another autograd file, an io include from a
  # layer that does not exist yet in the real tree.
  put src/core/bad.cpp $'#include "microllm/core/tensor.h"\n  #  include "microllm/autograd/node.h"'
  put include/microllm/core/bad.h '#include <microllm/ops/cast.h>'
  put src/ops/add/bad_cpu.cpp $'// x\n#include "../../model/config.h"'
  put src/autograd/other.cpp '#include "microllm/ops/elementwise.h"'
  put src/infer/engine.cpp $'#include "microllm/ops/ops.h"\n#include "microllm/io/tokenizer.h"'
  put src/serve/routes.cpp $'#include "microllm/cuda/runtime.h"\n#include "../model/x.h"'
  expect violations 1 "$(printf '%s\n' \
    'include/microllm/core/bad.h:1: core must not include microllm/ops/cast.h' \
    'src/autograd/other.cpp:1: autograd must not include microllm/ops/elementwise.h' \
    'src/core/bad.cpp:2: core must not include microllm/autograd/node.h' \
    'src/infer/engine.cpp:2: infer must not include microllm/io/tokenizer.h' \
    'src/ops/add/bad_cpu.cpp:2: ops must not include ../../model/config.h' \
    'src/serve/routes.cpp:1: serve must not include microllm/cuda/runtime.h' \
    'src/serve/routes.cpp:2: serve must not include ../model/x.h')"
  if [ "$failures" -gt 0 ]; then
    echo "check_layers --self-test: $failures case(s) failed" >&2
    return 1
  fi
  echo "check_layers --self-test: passed"
}

root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
  --self-test)
    self_test
    exit
    ;;
  --root)
    root=${2:?"--root needs a folder"}
    ;;
  "") ;;
  *)
    echo "usage: check_layers.sh [--root DIR | --self-test]" >&2
    exit 2
    ;;
esac
if check_tree "$root"; then
  echo "check_layers: every include of src/ and include/microllm/ points down"
else
  echo "check_layers: includes against the layer rules above (SPEC §3; scripts/check_layers.sh)" >&2
  exit 1
fi
