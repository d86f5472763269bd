# Everyday tasks. The README's two commands stay the way in; these are the
# pieces. CI runs ./scripts/test.sh (fmt, vet, lint, unit and e2e tiers).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
UNIT := $(shell go list ./... | grep -v /test/e2e)

.PHONY: fmt lint test e2e sdk docs build console

VERSION := $(shell cat VERSION)

build:                 ## the binaries, static, into bin/ (sbxd reports VERSION)
	CGO_ENABLED=0 go build -ldflags "-X github.com/sbxhq/sbx/internal/server.Version=$(VERSION)" -o bin/ ./cmd/...

fmt:                   ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

lint:                  ## gofmt check, go vet, staticcheck, tsc --strict of the TypeScript SDK, the console's bundle
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	go vet ./...
	go run $(STATICCHECK) ./...
	cd sdk/typescript && npm ci --no-audit --no-fund && npx tsc --noEmit --strict -p tsconfig.json
	./scripts/check-console.sh

test:                  ## the unit tier: no root, seconds to a minute
	go test -count=1 $(UNIT)

e2e:                   ## the end-to-end tier: real sbxd, real runsc (root); SBX_TEST_LAYERS=dir for the fallback path
	CI=$${CI:-} go test -count=1 -timeout 80m ./test/e2e/

sdk:                   ## the TypeScript and Python SDKs' own suites (against $$SBX_SOCKET/$$SBX_URL)
	cd sdk/typescript && npm ci --no-audit --no-fund && npm test
	PYTHONPATH=sdk/python python3 -m unittest discover -s sdk/python/tests -t sdk/python

console:               ## rebuild the web console's bundle (internal/console/dist) from internal/console/web
	cd internal/console/web && npm ci --no-audit --no-fund && npm run build

docs:                  ## the TypeScript SDK's API docs (typedoc) into sdk/typescript/docs
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run docs
