#!/usr/bin/env bash
# Runs the whole test suite, as root: vet, unit tests, and the end-to-end
# suite, which drives a real sbxd with real runsc sandboxes, and the blob
# store suite against a real S3-compatible server. Installs what the tests
# need first (Debian packages, runsc, versitygw). With CI=true a missing
# prerequisite fails the e2e suite instead of skipping it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh --test-deps
export PATH="$PATH:/usr/local/go/bin:/usr/local/bin"

echo
echo "==> gofmt, go vet, staticcheck"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
go vet ./...
# staticcheck, pinned, from the Go module proxy (cached after the first run).
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

echo
echo "==> web console: the committed bundle matches its sources (npm ci, tsc, esbuild)"
./scripts/check-console.sh

echo
echo "==> go test"
go test -count=1 -timeout 80m ./...
