#!/usr/bin/env bash
# Runs the whole test suite, as root: vet, unit tests, and the end-to-end
# suite, which drives a real sbxd with real runsc sandboxes (twice: on
# btrfs layers, then on the plain-directory fallback), and the blob store
# suite against a real S3-compatible server. Installs what the tests
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
echo "==> go test (the end-to-end suite on btrfs layers: checkpoints are snapshots)"
go test -count=1 -timeout 80m ./...

# The end-to-end suite again on the fallback path, where btrfs is not
# available: plain-directory layers, checkpoints captured into the chunk
# store by the call (sbxd --layers dir). Tests that never touch a layer
# (SDKs, console, terminal, network, MCP, secrets, files through the agent,
# the PostgreSQL store and the cluster's nodes) ran above and are not run
# twice; tests of quotas and of snapshot
# checkpoints skip themselves here.
layer_free='^(TestSDKPython|TestSDKTypeScript|TestExamplesGo|TestConsoleBrowser|TestConsoleCrossOrigin|TestTerminalStalledClient|TestNetworkAptMirror|TestMCPOfficialClient|TestSecretsEndToEnd|TestPostgresStore|TestOpenAPIContract|TestHostileFifo|TestPostgresOutage|TestFencedNodeComingBack|TestClusterForwarding|TestClusterNodeLoss|TestClusterResumeInterrupted|TestClusterRecovery|TestClusterSuspendBlobStoreDown)$'
echo
echo "==> go test ./test/e2e on the fallback path (SBX_TEST_LAYERS=dir)"
SBX_TEST_LAYERS=dir go test -count=1 -timeout 60m -skip "$layer_free" ./test/e2e/
