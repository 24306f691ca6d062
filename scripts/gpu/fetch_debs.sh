#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages that scripts/gpu/run.sh unpacks on the
# GPU machine, into .deb/ at the repository root (ignored by git; about 1.2 MB). Run once on a
# Debian 12 machine with apt; then carry .deb with the device call.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deb
grep -qx '/.deb/' .git/info/exclude 2>/dev/null || echo '/.deb/' >>.git/info/exclude
cd .deb
apt-get download \
  libgtest-dev libgmock-dev \
  libxxhash-dev libxxhash0 \
  nlohmann-json3-dev libcli11-dev \
  liburing-dev liburing2 \
  libbenchmark-dev libbenchmark1debian \
  pkgconf-bin libpkgconf3
ls -l
