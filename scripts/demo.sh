#!/usr/bin/env bash
# The main job: install what the build needs, build the CPU release of the `microllm` tool,
# and continue a prompt with the default model (models/microllm-brown, a 6.8M-parameter
# model microllm trained on the Brown corpus; docs/default-model.md), streaming the text as
# it is sampled.
#
#   bash scripts/demo.sh                        # the default prompt
#   bash scripts/demo.sh "It was late in the evening when"
#   bash scripts/demo.sh "The committee" --seed 3 --max-new-tokens 300 --temperature 0.6
# Arguments after the prompt go to `microllm generate` (its --help lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
prompt=${1:-"The history of the city"}
[ $# -gt 0 ] && shift
bash scripts/setup.sh build
cmake --preset cpu-release -DMICROLLM_BUILD_TESTS=OFF >/dev/null
cmake --build --preset cpu-release --target microllm_cli
echo
printf '%s' "$prompt"
./build/cpu-release/apps/microllm/microllm generate --prompt "$prompt" "$@"
