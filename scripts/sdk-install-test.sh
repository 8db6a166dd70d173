#!/usr/bin/env bash
# scripts/sdk-install-test.sh — installs each SDK the way its users do, into a
# fresh project outside this repository, and runs its quickstart
# (examples/<lang>) against a real gateway (`gateway serve --dev`).
#
#   bash scripts/sdk-install-test.sh [go] [python] [typescript]   (default: all)
#
#   go          a new module (go mod init) requiring the SDK, pointed at this
#               checkout by replace (as a user of a local checkout does); go
#               build of the quickstart; `go list -deps` must show none of the
#               server's dependencies (OPA, pgx, SQLite, echo, goose, OTel SDK).
#   python      a fresh venv, `pip install ./sdk/python` with no package
#               index (the build backend is in-tree, standard library only),
#               the distribution must be portcullis-sdk, and the quickstart
#               must import the installed copy, not this checkout.
#   typescript  a fresh npm project per install path a user has: from a
#               directory (a clean copy with no dist/ and no node_modules: npm
#               runs prepare), from git (a repository holding the package,
#               as a mirror of sdk/typescript would), and from the `npm pack`
#               tarball (what the registry serves).
#
# Environment: PORTCULLIS_TEST_GATEWAY_BIN names the gateway binary (the exec
# helper beside it); otherwise both are built here. Exit status: non-zero if
# any SDK failed; each failure says why.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
WORK=$(mktemp -d /tmp/portcullis-sdk-install.XXXXXX) || exit 2
GW_PID=""
cleanup() {
	if [[ -n $GW_PID ]]; then
		kill "$GW_PID" 2>/dev/null
		wait "$GW_PID" 2>/dev/null
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '==> sdk-install: %s\n' "$*" >&2; }
fail() {
	printf 'FAIL sdk-install: %s\n' "$*" >&2
	return 1
}

# --- the gateway ----------------------------------------------------------------
BIN=${PORTCULLIS_TEST_GATEWAY_BIN:-}
if [[ -z $BIN ]]; then
	log "building the gateway"
	go build -o "$WORK/bin/" ./cmd/gateway ./cmd/portcullis-exec-helper || exit 1
	BIN=$WORK/bin/gateway
fi

URL="" KEY=""
start_gateway() {
	local dir=$WORK/gateway i addr
	mkdir -p "$dir"
	# A clean environment but for what the gateway needs; the dev policy's
	# Exec needs a sandbox: bwrap when it works, else the process backend.
	local -a env=(env -i "PATH=$PATH" "HOME=$dir" "PORTCULLIS_LISTEN=127.0.0.1:0")
	if ! command -v bwrap >/dev/null 2>&1; then
		env+=("PORTCULLIS_SANDBOX_BACKEND=process" "PORTCULLIS_SANDBOX_REQUIRE=false")
	fi
	(cd "$dir" && exec "${env[@]}" "$BIN" serve --dev >"$dir/out.log" 2>"$dir/err.log") &
	GW_PID=$!
	for i in $(seq 1 240); do
		addr=$(grep -m1 '"msg":"listening"' "$dir/err.log" 2>/dev/null | sed -E 's/.*"addr":"([^"]+)".*/\1/')
		[[ -n $addr ]] && break
		kill -0 "$GW_PID" 2>/dev/null || break
		sleep 0.5
	done
	KEY=$(awk '$1 == "agent" { print $3; exit }' "$dir/out.log")
	if [[ -z $addr || -z $KEY ]]; then
		cat "$dir/out.log" "$dir/err.log" >&2
		fail "gateway serve --dev did not start"
		return 1
	fi
	URL=http://$addr
	log "gateway at $URL"
}

# check_quickstart NAME LOG: the quickstart ran both loops against the
# gateway: the program ran (success), the refused read came back as a
# refusal the model can read, and each loop names its receipts.
check_quickstart() {
	local name=$1 out=$2 api
	for api in openai anthropic; do
		grep -qE "^$api .*\"success\": ?true.*hello from" "$out" || { cat "$out" >&2; fail "$name: $api loop: the Exec call did not succeed"; return 1; }
		grep -qE "^$api .*\"code\": ?\"permission_denied\"" "$out" || { cat "$out" >&2; fail "$name: $api loop: the denied fs_read was not answered as permission_denied"; return 1; }
		grep -qE "^$api receipts: .*[0-9a-f]{8}-" "$out" || { cat "$out" >&2; fail "$name: $api loop: no receipts"; return 1; }
	done
	grep -qiE "^anthropic .*is_error=true" "$out" || { cat "$out" >&2; fail "$name: the refusal's tool_result is not is_error"; return 1; }
}

# --- Go -------------------------------------------------------------------------
test_go() {
	local proj=$WORK/go-agent deps
	mkdir -p "$proj" && cp examples/go/main.go "$proj/"
	(
		cd "$proj" || exit 1
		export GOFLAGS=-mod=mod GOWORK=off
		go mod init example.com/agent >/dev/null 2>&1 &&
			go mod edit -require=github.com/portcullis/portcullis/sdk@v0.1.0 \
				-replace=github.com/portcullis/portcullis/sdk="$ROOT/sdk" \
				-replace=github.com/portcullis/portcullis/wire="$ROOT/wire" &&
			go mod tidy >/dev/null 2>&1 && go build -o agent . || exit 1
		deps=$(go list -deps .) || exit 1
		bad=$(grep -E '^(github\.com/open-policy-agent|github\.com/jackc/pgx|modernc\.org/sqlite|github\.com/labstack/echo|github\.com/pressly/goose|go\.opentelemetry\.io/otel/sdk|github\.com/portcullis/portcullis/(gateway|backends|evidence|policies))' <<<"$deps")
		if [[ -n $bad ]]; then
			echo "the SDK pulls in server dependencies:" >&2
			echo "$bad" >&2
			exit 1
		fi
		echo "go: $(grep -c . <<<"$deps") packages in the agent's build, none of the server's" >&2
		PORTCULLIS_URL=$URL PORTCULLIS_API_KEY=$KEY ./agent >"$proj/out.log" 2>&1
	) || {
		cat "$proj/out.log" 2>/dev/null >&2
		fail "go: the fresh module did not build or run"
		return 1
	}
	check_quickstart go "$proj/out.log"
}

# --- Python -----------------------------------------------------------------------
test_python() {
	local proj=$WORK/py-agent venv=$WORK/py-agent/venv py
	mkdir -p "$proj" && cp examples/python/agent.py "$proj/"
	py=$(command -v python3) || { fail "python: python3 is missing"; return 1; }
	"$py" -m venv "$venv" || { fail "python: python3 -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
	# --no-index: nothing may come from a package index, the build backend
	# included (the SDK's is in-tree and standard library only), with pip's
	# default build isolation.
	"$venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$ROOT/sdk/python" ||
		{ fail "python: pip install ./sdk/python failed"; return 1; }
	"$venv/bin/pip" show portcullis-sdk >/dev/null 2>&1 || { fail "python: the distribution is not named portcullis-sdk"; return 1; }
	local where
	where=$(cd "$proj" && "$venv/bin/python" -c 'import portcullis, os; print(os.path.realpath(portcullis.__file__))')
	[[ $where == "$venv"/* ]] || { fail "python: imported portcullis from $where, not the venv"; return 1; }
	(cd "$proj" && PORTCULLIS_URL=$URL PORTCULLIS_API_KEY=$KEY "$venv/bin/python" agent.py >"$proj/out.log" 2>&1) ||
		{ cat "$proj/out.log" >&2; fail "python: the quickstart failed"; return 1; }
	check_quickstart python "$proj/out.log"
}

# --- TypeScript -------------------------------------------------------------------
# ts_source DIR: the package as a fresh checkout has it (tracked files, no
# dist/, no node_modules), the tests left out.
ts_source() {
	local f
	mkdir -p "$1"
	while IFS= read -r f; do
		[[ -e $f ]] || continue
		mkdir -p "$1/$(dirname "${f#sdk/typescript/}")"
		cp "$f" "$1/${f#sdk/typescript/}"
	done < <(git ls-files --cached --others --exclude-standard sdk/typescript | grep -v '^sdk/typescript/test/')
}

# ts_run NAME SPEC: a new npm project installs SPEC and runs the quickstart.
ts_run() {
	local name=$1 spec=$2 proj=$WORK/ts-agent-$1
	mkdir -p "$proj" && cp examples/typescript/agent.mjs "$proj/"
	(
		cd "$proj" || exit 1
		npm init -y >/dev/null 2>&1 &&
			npm install --no-audit --no-fund --loglevel=error "$spec" >"$proj/install.log" 2>&1 || {
			cat "$proj/install.log" >&2
			exit 1
		}
		[[ -f node_modules/@portcullis/sdk/dist/src/index.js ]] || {
			echo "no dist/src/index.js in the installed package" >&2
			exit 1
		}
		PORTCULLIS_URL=$URL PORTCULLIS_API_KEY=$KEY node agent.mjs >"$proj/out.log" 2>&1
	) || {
		cat "$proj/out.log" 2>/dev/null >&2
		fail "typescript ($name): install or quickstart failed"
		return 1
	}
	check_quickstart "typescript ($name)" "$proj/out.log"
}

test_typescript() {
	command -v npm >/dev/null 2>&1 || { fail "typescript: npm is missing"; return 1; }
	local rc=0 src=$WORK/ts-src git=$WORK/ts-git tgz
	# From a directory, as a fresh clone has it: npm runs prepare (build.mjs).
	ts_source "$src"
	ts_run dir "$src" || rc=1
	# From git: a repository holding the package (npm installs its
	# devDependencies, runs prepare, and packs it).
	ts_source "$git"
	(cd "$git" && git init -q && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm sdk) || rc=1
	ts_run git "git+file://$git" || rc=1
	# From the tarball the registry would serve; it must hold the built code
	# and nothing of the tests.
	tgz=$(cd "$src" && npm pack --silent --pack-destination "$WORK" 2>/dev/null | tail -n1)
	if [[ -z $tgz || ! -f $WORK/$tgz ]]; then
		fail "typescript: npm pack failed"
		rc=1
	elif tar -tzf "$WORK/$tgz" | grep -qE '^package/(test|dist/test|src)/'; then
		fail "typescript: the packed tarball carries sources or tests: $(tar -tzf "$WORK/$tgz" | tr '\n' ' ')"
		rc=1
	else
		ts_run tarball "$WORK/$tgz" || rc=1
	fi
	return $rc
}

# --- main -------------------------------------------------------------------------
sdks=("$@")
[[ ${#sdks[@]} -eq 0 ]] && sdks=(go python typescript)
start_gateway || exit 1
rc=0
for s in "${sdks[@]}"; do
	case $s in
	go | python | typescript)
		log "$s"
		t0=$SECONDS
		if "test_$s"; then
			log "$s ok ($((SECONDS - t0))s)"
		else
			rc=1
		fi
		;;
	*)
		fail "unknown SDK $s (go, python, typescript)"
		rc=1
		;;
	esac
done
exit $rc
