#!/usr/bin/env bash
# Installs the Debian packages microllm needs. Safe to run again: packages already present
# are skipped, and nothing is installed when all are there.
#   bash scripts/setup.sh build   what the build and the main job (scripts/demo.sh) need
#   bash scripts/setup.sh [all]   that plus the test dependencies (scripts/test.sh)
set -euo pipefail
scope=${1:-all}
case "$scope" in
  build | all) ;;
  *) echo "setup: expected 'build' or 'all', found '$scope'" >&2; exit 2 ;;
esac

packages=(
  cmake ninja-build g++ pkg-config          # build
  libopenblas-dev                           # CPU GEMM
  nlohmann-json3-dev libcli11-dev           # JSON, command line
  libpcre2-dev libutf8proc-dev              # tokenizer: Split regexes, NFC and Unicode categories
  libcpp-httplib-dev                        # the HTTP server (microllm serve)
)
if [ "$scope" = all ]; then
  packages+=(
    libfmt-dev
    libgtest-dev libgmock-dev libbenchmark-dev # tests and micro-benchmarks
    python3 python3-numpy python3-pytest python3-torch  # PyTorch oracle suite (/usr/bin/python3)
    clang-format-14                           # the format gate (scripts/check_format.sh)
  )
  # Tokenizer parity oracle (node + npm). A node already on PATH (e.g. NodeSource's, which
  # bundles npm and conflicts with Debian's npm package) is used as it is.
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present ($scope)"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
