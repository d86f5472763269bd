#!/usr/bin/env bash
# Sets up sbx on a fresh Debian bookworm machine, as root:
#   - Debian packages: mmdebstrap (image builds), busybox-static (tests), iproute2,
#     btrfs-progs (mkfs.btrfs for the writable layers volume)
#   - gVisor's runsc, pinned, built static from the Go module proxy
#   - sbxd, sbx and sbx-agent from this checkout, into /usr/local/bin
#   - a running sbxd (restarted if it runs; sandboxes survive restarts)
#   - the default image (Debian bookworm minbase + tools), built once and cached
#
#   ./scripts/install.sh              everything above
#   ./scripts/install.sh --test-deps  what the tests need instead: packages, runsc,
#                                     versitygw (a real S3-compatible server; ~6-9 min to build),
#                                     Node.js + npm and python3 (the SDK suites),
#                                     PostgreSQL (the PostgreSQL store's suite), Chromium (the console)
set -euo pipefail

RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237 # what @latest gave on 2026-11-29
VERSITYGW_VERSION=v1.8.0
PREFIX=/usr/local/bin
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "install.sh: run as root (sbxd manages mounts, namespaces and cgroups)" >&2
  exit 1
fi
export PATH="$PATH:/usr/local/go/bin:$PREFIX"

step() { printf '\n==> %s\n' "$*"; }

step "Debian packages"
pkgs=(mmdebstrap busybox-static iproute2 ca-certificates btrfs-progs)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  echo "installed: ${missing[*]}"
else
  echo "present: ${pkgs[*]}"
fi

step "gVisor runsc $RUNSC_VERSION (static)"
stamp=/usr/local/lib/sbx/runsc.version
if [ -x "$PREFIX/runsc" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$RUNSC_VERSION" ]; then
  echo "present: $PREFIX/runsc"
else
  echo "building (1-3 min; longer on a busy machine)..."
  CGO_ENABLED=0 GOBIN="$PREFIX" go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  mkdir -p "$(dirname "$stamp")"
  echo "$RUNSC_VERSION" >"$stamp"
fi
ver=$("$PREFIX/runsc" --version)
echo "${ver%%$'\n'*}"

if [ "${1:-}" = "--test-deps" ]; then
  step "versitygw $VERSITYGW_VERSION (S3-compatible server for the blob store tests)"
  stamp=/usr/local/lib/sbx/versitygw.version
  if [ -x "$PREFIX/versitygw" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$VERSITYGW_VERSION" ]; then
    echo "present: $PREFIX/versitygw"
  else
    echo "building (6-9 min on 2 cores)..."
    CGO_ENABLED=0 GOBIN="$PREFIX" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
    echo "$VERSITYGW_VERSION" >"$stamp"
  fi
  step "Node.js (>= 18) and python3 (>= 3.9) for the TypeScript and Python SDK suites"
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -lt 18 ] || ! command -v npm >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  fi
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
  fi
  # PyYAML for the Python SDK's schema-drift test; setuptools, wheel and pip to build its wheel offline.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml python3-setuptools python3-wheel python3-pip >/dev/null
  step "PostgreSQL for the PostgreSQL store's tests (they start their own throwaway server)"
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  ls -d /usr/lib/postgresql/*/bin
  step "Chromium (headless) for the web console's browser test"
  if ! command -v chromium >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
  chromium --version
  echo "node $(node --version), npm $(npm --version), $(python3 --version)"
  exit 0
fi

step "sbx binaries"
CGO_ENABLED=0 go build -ldflags "-X github.com/sbxhq/sbx/internal/server.Version=$(cat VERSION)" -o "$PREFIX/" ./cmd/sbxd ./cmd/sbx ./cmd/sbx-agent
ls -l "$PREFIX/sbxd" "$PREFIX/sbx" "$PREFIX/sbx-agent" | awk '{print $5, $9}'

step "sbxd"
mkdir -p /run/sbx /var/log
# The sbxd of the data dir holds the flock of its sbxd.lock and wrote its pid
# there, however it was started (this script, or by hand after a crash).
lockfile=/var/lib/sbx/sbxd.lock
if [ -f "$lockfile" ] && ! flock -n "$lockfile" true 2>/dev/null; then
  pid=$(tr -dc 0-9 <"$lockfile")
  # An sbxd from before the pid was written there: the pid file of the last start.
  [ -n "$pid" ] || pid=$(tr -dc 0-9 2>/dev/null </run/sbx/sbxd.pid || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    echo "stopping the running sbxd, pid $pid (its sandboxes keep running and are reattached)"
    kill "$pid"
  fi
  if ! flock -w 15 "$lockfile" true; then
    echo "the running sbxd (pid ${pid:-unknown}) did not stop within 15 s; stop it and run this again" >&2
    exit 1
  fi
fi
setsid "$PREFIX/sbxd" >>/var/log/sbxd.log 2>&1 </dev/null &
pid=$!
echo "$pid" >/run/sbx/sbxd.pid
up=""
for _ in $(seq 1200); do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  if sbx version >/dev/null 2>&1; then up=1; break; fi
  sleep 0.1
done
if [ -z "$up" ]; then
  echo "sbxd (pid $pid) did not come up; the end of /var/log/sbxd.log:" >&2
  tail -n 20 /var/log/sbxd.log >&2
  exit 1
fi
sbx version
echo "log: /var/log/sbxd.log"

step "default image"
if sbx image ls -o json | grep -q '"name": "default"'; then
  echo "present"
else
  sbx image build default
fi
