#!/usr/bin/env bash
# The main job: install, build, then `rangekv demo` on the embedded default (CPU, a temporary
# store, a real fixed-payload sweep with verification). Extra arguments go to `rangekv demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/default/tools/rangekv demo "$@"
