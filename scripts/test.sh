#!/usr/bin/env bash
# scripts/test.sh — the project's one test command (`bash scripts/test.sh`).
#
# Non-interactive and self-provisioning on a fresh Debian machine with Go:
#   * bubblewrap via apt-get (when root and missing),
#   * Chromium via apt-get (when root and missing; exports PORTCULLIS_CHROMIUM)
#     for the evidence explorer's headless browser test (tests/explorer_test.go),
#   * Deno from the npm registry into ./.tools (exports PORTCULLIS_DENO),
#   * the third-party MCP servers the upstream suite fronts
#     (@modelcontextprotocol/server-everything, server-filesystem) from the
#     npm registry into ./.tools/mcp (exports PORTCULLIS_MCP_SERVERS),
#   * PostgreSQL: uses 127.0.0.1:5432 when reachable, otherwise a throwaway
#     cluster on a free port (exports PORTCULLIS_TEST_DATABASE_URL), removed
#     on exit.
# Then: gofmt check, go vet (for Linux and, cross-checked, macOS: the seatbelt
# backend and the darwin build) and staticcheck in every Go module (the
# server, wire, sdk, examples/go), opa fmt/check of the shipped policy, go
# test (-race for unit packages, the end-to-end suite in tests/ without
# -race), the Python and TypeScript SDK suites, the SDK install test (each
# SDK installed into a fresh project, its quickstart run against a real
# gateway), client generation from the OpenAPI document (oapi-codegen,
# openapi-typescript), and a short fuzz run of every Fuzz* target.
#
# Knobs (environment):
#   PORTCULLIS_REQUIRE_POSTGRES=1  fail instead of skipping Postgres tests
#   PORTCULLIS_REQUIRE_BWRAP=1     fail when bubblewrap is missing
#   PORTCULLIS_REQUIRE_MCP_SERVERS=1 fail when the npm MCP servers are missing
#                                  (otherwise the upstream tests skip, saying why)
#   PORTCULLIS_REQUIRE_CHROMIUM=1  fail when Chromium is missing (otherwise the
#                                  explorer browser test skips, saying why)
#   PORTCULLIS_REQUIRE_TMPFS=1     fail when a tmpfs cannot be mounted (root) for the
#                                  SQLite disk-full fault test, instead of skipping
#   PORTCULLIS_CHROMIUM=/path      the Chromium binary to use (default: found)
#   PORTCULLIS_FUZZTIME=10s        per-target fuzz time (0 or "off" skips fuzzing)
#   PORTCULLIS_TEST_RACE=0         run unit tests without -race
#   PORTCULLIS_TEST_TIMEOUT=20m    go test -timeout
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)

FUZZTIME=${PORTCULLIS_FUZZTIME:-10s}
RACE=${PORTCULLIS_TEST_RACE:-1}
TIMEOUT=${PORTCULLIS_TEST_TIMEOUT:-20m}

declare -a SUMMARY=()
FAILED=0
START_ALL=$SECONDS

log() { printf '==> %s\n' "$*" >&2; }
warn() { printf 'WARN: %s\n' "$*" >&2; }

# record NAME STATUS SECONDS: one line of the final summary.
record() {
	SUMMARY+=("$(printf '%-6s %-40s %5ss' "$2" "$1" "$3")")
	if [[ $2 == FAIL ]]; then FAILED=1; fi
}

# step NAME CMD...: run a command, time it and record the result.
step() {
	local name=$1
	shift
	local t0=$SECONDS
	log "$name"
	if "$@"; then
		record "$name" ok $((SECONDS - t0))
	else
		record "$name" FAIL $((SECONDS - t0))
	fi
}

is_root() { [[ $(id -u) -eq 0 ]]; }

APT_UPDATED=0
apt_install() {
	is_root || return 1
	command -v apt-get >/dev/null 2>&1 || return 1
	if [[ $APT_UPDATED -eq 0 ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
		APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- bubblewrap -------------------------------------------------------------
ensure_bwrap() {
	if command -v bwrap >/dev/null 2>&1; then
		return 0
	fi
	log "installing bubblewrap"
	apt_install bubblewrap || warn "could not install bubblewrap"
	if command -v bwrap >/dev/null 2>&1; then
		return 0
	fi
	if [[ ${PORTCULLIS_REQUIRE_BWRAP:-0} == 1 ]]; then
		echo "bubblewrap is required (PORTCULLIS_REQUIRE_BWRAP=1) but missing" >&2
		return 1
	fi
	warn "bubblewrap missing: sandboxed tests will skip"
	return 0
}

# --- Chromium (the evidence explorer's browser test) --------------------------
find_chromium() {
	local c
	for c in "${PORTCULLIS_CHROMIUM:-}" /usr/bin/chromium \
		"$(command -v chromium 2>/dev/null)" "$(command -v chromium-browser 2>/dev/null)" \
		"$(command -v google-chrome-stable 2>/dev/null)" "$(command -v google-chrome 2>/dev/null)"; do
		if [[ -n $c && -x $c ]] && "$c" --version >/dev/null 2>&1; then
			printf '%s\n' "$c"
			return 0
		fi
	done
	return 1
}

ensure_chromium() {
	local c
	if c=$(find_chromium); then
		export PORTCULLIS_CHROMIUM=$c
		return 0
	fi
	log "installing chromium"
	apt_install chromium || warn "could not install chromium"
	if c=$(find_chromium); then
		export PORTCULLIS_CHROMIUM=$c
		return 0
	fi
	if [[ ${PORTCULLIS_REQUIRE_CHROMIUM:-0} == 1 ]]; then
		echo "Chromium is required (PORTCULLIS_REQUIRE_CHROMIUM=1) but missing and not installable" >&2
		return 1
	fi
	warn "Chromium missing: the evidence explorer browser test will skip"
	return 0
}

# --- Deno (from the npm registry) --------------------------------------------
find_deno() {
	local c
	for c in \
		"$ROOT/.tools/node_modules/@deno/linux-x64-glibc/bin/deno" \
		"$ROOT/.tools/node_modules/@deno/linux-arm64-glibc/bin/deno" \
		"$ROOT/.tools/node_modules/@deno/linux-x64-glibc/deno" \
		"$ROOT/.tools/node_modules/@deno/linux-arm64-glibc/deno" \
		"$ROOT/.tools/node_modules/.bin/deno"; do
		if [[ -x $c ]] && "$c" --version >/dev/null 2>&1; then
			printf '%s\n' "$c"
			return 0
		fi
	done
	c=$(find "$ROOT/.tools/node_modules/@deno" -type f -name deno -perm -u+x 2>/dev/null | head -n1)
	if [[ -n $c ]] && "$c" --version >/dev/null 2>&1; then
		printf '%s\n' "$c"
		return 0
	fi
	return 1
}

ensure_deno() {
	local d
	if [[ -n ${PORTCULLIS_DENO:-} && -x ${PORTCULLIS_DENO} ]]; then
		return 0
	fi
	if d=$(find_deno); then
		export PORTCULLIS_DENO=$d
		return 0
	fi
	if command -v deno >/dev/null 2>&1; then
		PORTCULLIS_DENO=$(command -v deno)
		export PORTCULLIS_DENO
		return 0
	fi
	if ! command -v npm >/dev/null 2>&1; then
		log "installing npm"
		apt_install npm || true
	fi
	if ! command -v npm >/dev/null 2>&1; then
		warn "npm missing: cannot install Deno; code.run tests will skip"
		return 0
	fi
	log "installing deno@2 into .tools"
	mkdir -p "$ROOT/.tools"
	if ! npm install --prefix "$ROOT/.tools" --no-audit --no-fund --loglevel=error deno@2 >&2; then
		warn "npm install deno@2 failed"
		return 0
	fi
	if d=$(find_deno); then
		export PORTCULLIS_DENO=$d
	else
		warn "deno installed but no runnable binary found under .tools"
	fi
	return 0
}

# --- MCP servers (from the npm registry) -------------------------------------
MCP_SERVERS=(@modelcontextprotocol/server-everything @modelcontextprotocol/server-filesystem)

ensure_mcp_servers() {
	local dir="$ROOT/.tools/mcp" missing=0 p
	for p in "${MCP_SERVERS[@]}"; do
		[[ -f $dir/node_modules/$p/dist/index.js ]] || missing=1
	done
	if [[ $missing == 1 ]]; then
		if ! command -v npm >/dev/null 2>&1; then
			apt_install npm || true
		fi
		log "installing ${MCP_SERVERS[*]} into .tools/mcp"
		mkdir -p "$dir"
		if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${MCP_SERVERS[@]}" >&2; then
			warn "npm install of the MCP servers failed"
		fi
	fi
	for p in "${MCP_SERVERS[@]}"; do
		if [[ ! -f $dir/node_modules/$p/dist/index.js ]]; then
			if [[ ${PORTCULLIS_REQUIRE_MCP_SERVERS:-0} == 1 ]]; then
				echo "MCP server $p is required (PORTCULLIS_REQUIRE_MCP_SERVERS=1) but missing" >&2
				return 1
			fi
			warn "MCP server $p missing: the upstream tests will skip"
			return 0
		fi
	done
	export PORTCULLIS_MCP_SERVERS="$dir/node_modules"
	return 0
}

# --- PostgreSQL ---------------------------------------------------------------
PG_TMP=""
PG_CTL=""
PG_RUN=()

stop_pg() {
	if [[ -n $PG_TMP ]]; then
		"${PG_RUN[@]}" "$PG_CTL" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 || true
		rm -rf "$PG_TMP"
		PG_TMP=""
	fi
}
trap 'stop_pg; [[ -n ${SDK_BIN_DIR:-} ]] && rm -rf "$SDK_BIN_DIR"' EXIT
trap 'exit 130' INT TERM

pg_reachable() { # host port
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h "$1" -p "$2" -t 3
	elif command -v psql >/dev/null 2>&1; then
		psql -h "$1" -p "$2" -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1
	else
		(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
	fi
}

pg_bindir() {
	local b
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v pg_ctl)")"
		return 0
	fi
	b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
	[[ -n $b && -x $b/initdb ]] && printf '%s\n' "$b"
}

free_port() {
	local p
	for p in $(seq 55432 55532); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	return 1
}

ensure_postgres() {
	if [[ -n ${PORTCULLIS_TEST_DATABASE_URL:-} ]]; then
		log "using PORTCULLIS_TEST_DATABASE_URL from the environment"
		return 0
	fi
	if pg_reachable 127.0.0.1 5432; then
		export PORTCULLIS_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		return 0
	fi
	local bin
	bin=$(pg_bindir)
	if [[ -z $bin ]]; then
		log "installing postgresql"
		apt_install postgresql postgresql-client >/dev/null || true
		bin=$(pg_bindir)
	fi
	if [[ -z $bin ]]; then
		if [[ ${PORTCULLIS_REQUIRE_POSTGRES:-0} == 1 ]]; then
			echo "PostgreSQL is required (PORTCULLIS_REQUIRE_POSTGRES=1) but none is reachable or installable" >&2
			return 1
		fi
		warn "no PostgreSQL: Postgres tests will skip"
		return 0
	fi
	local port
	port=$(free_port) || {
		echo "no free port for a throwaway PostgreSQL" >&2
		return 1
	}
	PG_TMP=$(mktemp -d /tmp/portcullis-pg.XXXXXX)
	PG_CTL="$bin/pg_ctl"
	if is_root; then
		if ! id postgres >/dev/null 2>&1; then
			useradd --system --no-create-home --shell /usr/sbin/nologin postgres || return 1
		fi
		chown postgres "$PG_TMP"
		chmod 700 "$PG_TMP"
		PG_RUN=(runuser -u postgres --)
	fi
	log "starting throwaway PostgreSQL on 127.0.0.1:$port ($PG_TMP)"
	if ! "${PG_RUN[@]}" "$bin/initdb" -D "$PG_TMP/data" -U postgres -A trust -E UTF8 --no-sync >"$PG_TMP/initdb.log" 2>&1; then
		cat "$PG_TMP/initdb.log" >&2
		return 1
	fi
	if ! "${PG_RUN[@]}" "$PG_CTL" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 60 \
		-o "-p $port -k $PG_TMP -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null; then
		cat "$PG_TMP/server.log" >&2
		return 1
	fi
	export PORTCULLIS_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

# --- checks ------------------------------------------------------------------
# go_modules lists the directory of every Go module here: the server at the
# root, and, as modules of their own, wire/ and sdk/ (so an agent importing
# the SDK gets none of the server's dependencies) and examples/go (the Go
# quickstart). `go ... ./...` at the root does not descend into them.
go_modules() {
	find . \( -path ./.git -o -path ./.tools -o -path ./.portcullis -o -name testdata -o -name node_modules \) -prune \
		-o -type f -name go.mod -print | sed -e 's|/go.mod$||' | sort
}

# in_modules CMD...: run CMD in every Go module; fails if any fails.
in_modules() {
	local m rc=0
	for m in $(go_modules); do
		if ! (cd "$m" && "$@"); then
			echo "in module $m: $* failed" >&2
			rc=1
		fi
	done
	return $rc
}

go_files() {
	find . \( -path ./.git -o -path ./.tools -o -path ./.portcullis -o -name testdata -o -name node_modules \) -prune \
		-o -type f -name '*.go' -print
}

check_gofmt() {
	local bad
	bad=$(go_files | xargs -r gofmt -l)
	if [[ -n $bad ]]; then
		echo "gofmt: these files are not formatted (run gofmt -w):" >&2
		printf '  %s\n' $bad >&2
		return 1
	fi
}

run_unit_tests() {
	local pkgs m rc=0
	pkgs=$(go list ./... | grep -v "^github.com/portcullis/portcullis/tests$")
	local race=()
	if [[ $RACE == 1 && $(go env CGO_ENABLED) == 1 ]] && command -v gcc >/dev/null 2>&1; then
		race=(-race)
	fi
	if [[ -n $pkgs ]]; then
		# shellcheck disable=SC2086
		go test -count=1 "${race[@]}" -timeout "$TIMEOUT" $pkgs || rc=1
	fi
	# The nested modules (wire, sdk, examples/go); the SDK's tests run the
	# gateway built once for the SDK steps.
	ensure_sdk_gateway_bin || return 1
	for m in $(go_modules); do
		[[ $m == . ]] && continue
		(cd "$m" && PORTCULLIS_TEST_GATEWAY_BIN=$SDK_GATEWAY_BIN go test -count=1 "${race[@]}" -timeout "$TIMEOUT" ./...) || rc=1
	done
	return $rc
}

run_e2e_tests() {
	if ! go list ./tests >/dev/null 2>&1; then
		return 0
	fi
	go test -count=1 -timeout "$TIMEOUT" ./tests # tests/bench runs with the unit packages
}

# fuzz_once DIR NAME: one fuzz run of NAME; its output goes to stdout and to
# $FUZZ_LOG so the caller can tell a finding from the coordinator's shutdown race.
fuzz_once() {
	# Run from the package's directory, so a package of a nested module
	# (wire/) is fuzzed in its own module.
	(cd "$1" && go test -run='^$' -fuzz="^${2}\$" -fuzztime="$FUZZTIME" .) 2>&1 | tee "$FUZZ_LOG"
	return "${PIPESTATUS[0]}"
}

# fuzz_deadline_race: the failed run in $FUZZ_LOG is only Go's fuzz
# coordinator racing its own -fuzztime deadline (golang/go#75804, fixed in
# Go 1.27): a bare "context deadline exceeded", no failing input written, no
# panic, no test error. Anything else is a finding.
fuzz_deadline_race() {
	grep -q 'context deadline exceeded' "$FUZZ_LOG" &&
		! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$FUZZ_LOG"
}

# run_fuzz discovers every `func FuzzX(` in a _test.go file and fuzzes it
# briefly. A run that fails only by the coordinator's deadline race is run
# once more; a second failure of any kind fails the step.
run_fuzz() {
	local f dir name rc=0
	FUZZ_LOG=$(mktemp)
	while IFS= read -r f; do
		dir=$(dirname "$f")
		while IFS= read -r name; do
			log "fuzz $dir $name ($FUZZTIME)"
			if fuzz_once "$dir" "$name"; then
				continue
			fi
			if fuzz_deadline_race; then
				warn "fuzz $name: Go's fuzz coordinator deadline race (golang/go#75804), no finding; running it once more"
				fuzz_once "$dir" "$name" && continue
			fi
			echo "fuzz target $name in $dir failed" >&2
			rc=1
		done < <(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(' "$f" | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(/\1/' | sort -u)
	done < <(find . \( -path ./.git -o -path ./.tools -o -name node_modules \) -prune -o -type f -name '*_test.go' -print |
		xargs -r grep -lE '^func Fuzz[A-Za-z0-9_]*\(' | sort)
	rm -f "$FUZZ_LOG"
	return $rc
}

# --- staticcheck (from the Go module proxy, pinned) ---------------------------
STATICCHECK_VERSION=v0.8.2
run_staticcheck() {
	local bin="$ROOT/.tools/bin/staticcheck"
	if ! [[ -x $bin ]] || ! "$bin" -version 2>/dev/null | grep -q "(${STATICCHECK_VERSION#v})"; then
		log "installing staticcheck $STATICCHECK_VERSION into .tools/bin"
		GOBIN="$ROOT/.tools/bin" go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION" || return 1
	fi
	in_modules "$bin" ./...
}

# --- Rego hygiene (the opa CLI at the go.mod version) --------------------------
# The shipped bundle must be `opa fmt` clean and pass `opa check --strict`
# with the same OPA the gateway links, so a policy author's `opa fmt` and the
# gateway never disagree about the library. Built once into .tools/bin.
opa_version() { go list -m -f '{{.Version}}' github.com/open-policy-agent/opa; }
ensure_opa() {
	local v have="" bin="$ROOT/.tools/bin/opa"
	v=$(opa_version) || return 1
	[[ -x $bin ]] && have=$("$bin" version 2>/dev/null)
	if ! grep -qx "Version: ${v#v}" <<<"$have"; then
		log "installing opa $v into .tools/bin"
		GOBIN="$ROOT/.tools/bin" go install "github.com/open-policy-agent/opa@$v" || return 1
	fi
	OPA_BIN=$bin
}
run_rego_checks() {
	ensure_opa || return 1
	"$OPA_BIN" fmt --fail -l policies/bundle || {
		echo "opa fmt: the files above are not formatted (run: $OPA_BIN fmt -w policies/bundle)" >&2
		return 1
	}
	"$OPA_BIN" check --strict policies/bundle
}

# --- SDKs (sdk/python, sdk/typescript) ----------------------------------------
# Both suites start the real gateway binary; it is built once here and named
# to them by PORTCULLIS_TEST_GATEWAY_BIN (set only for these steps, so the Go
# end-to-end suite keeps building its own). Missing tools fail, never skip.
SDK_BIN_DIR=""
SDK_GATEWAY_BIN=""
# ensure_sdk_gateway_bin builds the gateway once (in this shell, so the
# result and the EXIT cleanup see it).
ensure_sdk_gateway_bin() {
	[[ -n $SDK_GATEWAY_BIN && -x $SDK_GATEWAY_BIN ]] && return 0
	SDK_BIN_DIR=$(mktemp -d /tmp/portcullis-sdk-bin.XXXXXX) || return 1
	go build -o "$SDK_BIN_DIR/" ./cmd/gateway ./cmd/portcullis-exec-helper >&2 || return 1
	SDK_GATEWAY_BIN=$SDK_BIN_DIR/gateway
}

run_python_sdk_tests() {
	ensure_sdk_gateway_bin || return 1
	if ! command -v python3 >/dev/null 2>&1; then
		apt_install python3 || true
	fi
	command -v python3 >/dev/null 2>&1 || {
		echo "python3 is required for the Python SDK tests" >&2
		return 1
	}
	(cd sdk/python && PORTCULLIS_TEST_GATEWAY_BIN=$SDK_GATEWAY_BIN python3 -m unittest discover -s tests -t . -v)
}

run_typescript_sdk_tests() {
	ensure_sdk_gateway_bin || return 1
	if ! command -v npm >/dev/null 2>&1; then
		apt_install nodejs npm || true
	fi
	command -v npm >/dev/null 2>&1 || {
		echo "node and npm are required for the TypeScript SDK and MCP client tests" >&2
		return 1
	}
	(cd sdk/typescript &&
		npm ci --no-audit --no-fund --loglevel=error &&
		PORTCULLIS_TEST_GATEWAY_BIN=$SDK_GATEWAY_BIN npm test)
}

# run_sdk_install_tests installs each SDK into a fresh project outside the
# repository, as its users do, and runs its quickstart against a real
# gateway (scripts/sdk-install-test.sh).
run_sdk_install_tests() {
	ensure_sdk_gateway_bin || return 1
	PORTCULLIS_TEST_GATEWAY_BIN=$SDK_GATEWAY_BIN bash "$ROOT/scripts/sdk-install-test.sh"
}

# run_openapi_client_tests generates a Go client (oapi-codegen) and
# TypeScript types (openapi-typescript) from gateway/openapi.json and
# compiles both (scripts/openapi-clients-test.sh). Needs Go and npm.
run_openapi_client_tests() {
	if ! command -v npm >/dev/null 2>&1; then
		apt_install nodejs npm || true
	fi
	bash "$ROOT/scripts/openapi-clients-test.sh"
}

# --- deployment files -----------------------------------------------------------
# The Dockerfile through BuildKit's own parser and lint rules plus the
# promises docs/deploy.md makes of it (deploy/dockerfile-check: no Docker
# engine needed); the systemd unit through `systemd-analyze verify`, with
# ExecStart pointed at the built gateway (verify insists the binary exists),
# where any warning fails (verify itself exits 0 on unknown keys).
run_deploy_checks() {
	local rc=0 unit out
	(cd deploy/dockerfile-check && go run . ../../Dockerfile) || rc=1
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		apt_install systemd >/dev/null 2>&1 || true
	fi
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		warn "systemd-analyze missing and not installable: deploy/portcullis.service was not verified"
		return $rc
	fi
	ensure_sdk_gateway_bin || return 1
	unit=$(mktemp -d /tmp/portcullis-unit.XXXXXX)/portcullis.service
	sed "s#/usr/local/bin/gateway#$SDK_GATEWAY_BIN#g" deploy/portcullis.service >"$unit"
	if ! out=$(systemd-analyze verify "$unit" 2>&1) || [[ -n $out ]]; then
		echo "systemd-analyze verify deploy/portcullis.service:" >&2
		printf '%s\n' "$out" >&2
		rc=1
	fi
	rm -rf "$(dirname "$unit")"
	return $rc
}

# --- main --------------------------------------------------------------------
log "go: $(go version)"
step "provision: bubblewrap" ensure_bwrap
step "provision: deno" ensure_deno
step "provision: MCP servers (npm)" ensure_mcp_servers
step "provision: postgresql" ensure_postgres
step "provision: chromium" ensure_chromium
log "PORTCULLIS_DENO=${PORTCULLIS_DENO:-<none>}"
log "PORTCULLIS_TEST_DATABASE_URL=${PORTCULLIS_TEST_DATABASE_URL:-<none>}"
log "PORTCULLIS_CHROMIUM=${PORTCULLIS_CHROMIUM:-<none>}"

if [[ $FAILED -eq 0 ]]; then
	step "gofmt" check_gofmt
	step "go vet ./... (every module)" in_modules go vet ./...
	step "GOOS=darwin go vet ./... (every module)" in_modules env GOOS=darwin go vet ./...
	step "staticcheck ./..." run_staticcheck
	step "opa fmt --fail + opa check --strict (policies/bundle)" run_rego_checks
	step "go test (unit$([[ $RACE == 1 ]] && echo ', -race'))" run_unit_tests
	step "go test ./tests (end-to-end)" run_e2e_tests
	step "python SDK (unittest)" run_python_sdk_tests
	step "typescript SDK + MCP client (node --test)" run_typescript_sdk_tests
	step "SDK installs: fresh projects run the quickstarts" run_sdk_install_tests
	step "openapi: oapi-codegen + openapi-typescript clients compile" run_openapi_client_tests
	step "deploy: Dockerfile (BuildKit parse + lint) and systemd unit (verify)" run_deploy_checks
	if [[ $FUZZTIME != 0 && $FUZZTIME != off ]]; then
		step "fuzz (${FUZZTIME} per target)" run_fuzz
	fi
fi

echo
echo "==================== summary ===================="
printf '%s\n' "${SUMMARY[@]}"
echo "total $((SECONDS - START_ALL))s"
if [[ $FAILED -ne 0 ]]; then
	echo "RESULT: FAIL"
	exit 1
fi
echo "RESULT: ok"
