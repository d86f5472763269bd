#!/usr/bin/env bash
# Checks that the web console's committed bundle (internal/console/dist,
# embedded in sbxd) is what its sources build to: installs the pinned
# toolchain from internal/console/web/package-lock.json (npm ci), type-checks
# the sources (tsc --strict), builds them into a temporary directory and
# compares byte for byte. After changing internal/console/web, rebuild with
#   cd internal/console/web && npm ci && npm run build
# and commit dist/ with the sources.
set -euo pipefail
cd "$(dirname "$0")/../internal/console/web"
npm ci --no-audit --no-fund --loglevel=error
npx tsc --noEmit -p tsconfig.json
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
node build.mjs "$out"
if ! diff -r "$out" ../dist >/dev/null; then
  echo "internal/console/dist does not match its sources; rebuild it (cd internal/console/web && npm ci && npm run build) and commit it:" >&2
  diff -rq "$out" ../dist >&2 || true
  exit 1
fi
echo "internal/console/dist matches its sources ($(ls ../dist | wc -l) files)"
