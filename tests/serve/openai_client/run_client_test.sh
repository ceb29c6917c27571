#!/usr/bin/env bash
# The official-client test (CTest `serve_openai_client`, label oracle): installs the npm
# `openai` client with `npm ci` from this folder's package-lock.json into the cache (once),
# starts `microllm serve` on the committed qwen2-trained fixture on a free port, waits for
# /health, runs client_test.mjs against it and stops the server.
#
#   bash tests/serve/openai_client/run_client_test.sh --cli BIN --work DIR
#
# Needs node, npm and the npm registry (scripts/setup.sh installs node and npm). The cache is
# $MICROLLM_NODE_CACHE or build/.cache/openai-client.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cli="" work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    *) echo "run_client_test.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$cli" ] && [ -n "$work" ] || { echo "usage: run_client_test.sh --cli BIN --work DIR" >&2; exit 2; }
command -v node >/dev/null || { echo "run_client_test.sh: node is needed (bash scripts/setup.sh installs it)" >&2; exit 1; }

modules="${MICROLLM_NODE_CACHE:-$repo/build/.cache/openai-client}"
if ! cmp -s "$here/package-lock.json" "$modules/package-lock.json" || [ ! -d "$modules/node_modules/openai" ]; then
  echo "run_client_test.sh: npm ci (openai client) into $modules"
  rm -rf "$modules"
  mkdir -p "$modules"
  cp "$here/package.json" "$here/package-lock.json" "$modules/"
  (cd "$modules" && npm ci --no-audit --no-fund --silent)
fi
cp "$here/client_test.mjs" "$modules/"

mkdir -p "$work"
log="$work/serve.log"
"$cli" serve --model "$repo/tests/fixtures/models/qwen2-trained" --port 0 \
  --template-family chatml --max-num-seqs 8 --kv-memory 0.02 > "$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT

# The port from "serve: listening on http://HOST:PORT, ...", then /health 200 (model loaded).
base=""
for _ in $(seq 1 200); do
  base=$(sed -n 's/^serve: listening on \(http:\/\/[^,]*\),.*/\1/p' "$log" | head -1)
  [ -n "$base" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "run_client_test.sh: the server exited" >&2; exit 1; }
  sleep 0.05
done
[ -n "$base" ] || { cat "$log" >&2; echo "run_client_test.sh: no listening line" >&2; exit 1; }
for _ in $(seq 1 600); do
  code=$(node -e "fetch('$base/health').then(r => console.log(r.status)).catch(() => console.log(0))")
  [ "$code" = 200 ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "run_client_test.sh: the server exited" >&2; exit 1; }
  sleep 0.1
done
[ "$code" = 200 ] || { cat "$log" >&2; echo "run_client_test.sh: /health never answered 200" >&2; exit 1; }

status=0
node "$modules/client_test.mjs" "$base" qwen2-trained || status=$?
[ "$status" = 0 ] || { echo "--- server log" >&2; cat "$log" >&2; }
exit "$status"
