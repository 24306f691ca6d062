#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages that scripts/gpu/run.sh unpacks on the
# GPU machine, into .deb/ at the repository root (ignored by git; about 6.5 MB). Run once on a
# Debian 12 machine with apt; then carry .deb with the device call. The cluster tier's libcurl,
# hiredis and OpenSSL come with their own packages; libcurl's further dependencies (nghttp2,
# libssh2, krb5, ...) are the machine's own (not yet tried on a GPU machine: no device time was
# left when the cluster tier landed).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deb
# .gitignore ignores .deb/; only a checkout without that line needs the exclude (git-path also
# finds it in a worktree, where .git is a file).
if ! git check-ignore -q .deb/x; then
  echo '/.deb/' >>"$(git rev-parse --git-path info/exclude)"
fi
cd .deb
apt-get download \
  libgtest-dev libgmock-dev \
  libxxhash-dev libxxhash0 \
  nlohmann-json3-dev libcli11-dev \
  liburing-dev liburing2 \
  libbenchmark-dev libbenchmark1debian \
  pkgconf-bin libpkgconf3 \
  libcurl4-openssl-dev libcurl4 libhiredis-dev libhiredis0.14 libssl-dev libssl3 \
  libnghttp2-14 libidn2-0 librtmp1 libssh2-1 libpsl5 libgssapi-krb5-2 libkrb5-3 libk5crypto3 \
  libkrb5support0 libkeyutils1 libcom-err2 libldap-2.5-0 libsasl2-2 libsasl2-modules-db \
  libbrotli1 libunistring2 libgnutls30 libhogweed6 libnettle8 libgmp10 libp11-kit0 libtasn1-6 \
  libdb5.3 \
  redis-server redis-tools libjemalloc2 liblzf1
ls -l
