#!/usr/bin/env bash
# The main job for now: build the CPU release configuration and run `microllm demo`, which
# fits a one-block attention model by gradient descent and prints the loss falling.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset cpu-release >/dev/null
cmake --build --preset cpu-release --target microllm_cli
./build/cpu-release/apps/microllm/microllm demo "$@"
