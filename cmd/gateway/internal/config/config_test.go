package config

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

const goodHash = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

// TestGolden loads a full config file and compares the result, as JSON, with
// testdata/full.golden.json.
func TestGolden(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("testdata", "full.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(cfg, "", "  ")
	golden := filepath.Join("testdata", "full.golden.json")
	if *update {
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.TrimSpace(string(want)), strings.TrimSpace(string(got))); diff != "" {
		t.Errorf("config differs from golden (-want +got):\n%s", diff)
	}
}

func TestEnvOverrides(t *testing.T) {
	t.Parallel()
	cfg, err := Load(filepath.Join("testdata", "full.yaml"), []string{
		"PORTCULLIS_LISTEN=127.0.0.1:7000",
		"PORTCULLIS_POLICY_BUNDLE=/tmp/other",
		"PORTCULLIS_POLICY_POLL_INTERVAL=5s",
		"PORTCULLIS_EVIDENCE_RETENTION=30d",
		"PORTCULLIS_EVIDENCE_COMMIT_TIMEOUT=3s",
		"PORTCULLIS_RUNTIME_GC_PERCENT=-1",
		"PORTCULLIS_RUNTIME_MEMORY_LIMIT=768MiB",
		"PORTCULLIS_SANDBOX_REQUIRE=false",
		`PORTCULLIS_PRINCIPALS=[{"id":"x","roles":["auditor"],"api_key_sha256":"` + goodHash + `"}]`,
		"UNRELATED=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:7000" || cfg.Policy.Bundle != "/tmp/other" || cfg.Sandbox.Require {
		t.Errorf("scalars not overridden: %+v", cfg)
	}
	if cfg.Policy.PollInterval.Std() != 5*time.Second || cfg.Evidence.Retention.Std() != 30*24*time.Hour || cfg.Evidence.CommitTimeout.Std() != 3*time.Second {
		t.Errorf("durations: poll %v retention %v commit timeout %v", cfg.Policy.PollInterval.Std(), cfg.Evidence.Retention.Std(), cfg.Evidence.CommitTimeout.Std())
	}
	if n, err := cfg.Runtime.MemoryLimitBytes(); cfg.Runtime.GCPercent != -1 || n != 768<<20 || err != nil {
		t.Errorf("runtime = %+v (limit %d, %v)", cfg.Runtime, n, err)
	}
	if len(cfg.Principals) != 1 || cfg.Principals[0].ID != "x" || cfg.Principals[0].Roles[0] != "auditor" {
		t.Errorf("principals = %+v", cfg.Principals)
	}
}

// TestErrorsNameTheKey: every invalid setting is refused at load with an
// error that names the key at fault.
func TestErrorsNameTheKey(t *testing.T) {
	t.Parallel()
	p := func(extra string) string {
		return "principals:\n  - id: a\n    roles: [agent]\n    api_key_sha256: " + goodHash + "\n" + extra
	}
	cases := []struct {
		name, yaml string
		env        []string
		wantKey    string
	}{
		{"unknown key", "listn: x\n", nil, "listn"},
		{"bad listen", "listen: nope\n", nil, "listen"},
		{"bad database url", "database_url: mysql://x\n", nil, "database_url"},
		{"bad backend", "sandbox: {backend: docker}\n", nil, "sandbox.backend"},
		{"run_as root", "sandbox: {backend: process, run_as: \"0:0\"}\n", nil, "sandbox.run_as"},
		{"run_as root group", "sandbox: {backend: process, run_as: \"1000:0\"}\n", nil, "sandbox.run_as"},
		{"run_as name", "sandbox: {backend: process, run_as: nobody}\n", nil, "sandbox.run_as"},
		{"run_as no id", "sandbox: {backend: process, run_as: \"4294967295:1\"}\n", nil, "sandbox.run_as"},
		{"run_as with bwrap", "sandbox: {backend: bwrap, run_as: \"1000:1000\"}\n", nil, "sandbox.run_as"},
		{"run_as from env", "", []string{"PORTCULLIS_SANDBOX_RUN_AS=-1:5"}, "sandbox.run_as"},
		{"proxy not a cidr", "trusted_proxies: [\"10.0.0.0/33\"]\n", nil, "trusted_proxies[0]"},
		{"proxy host bits", "trusted_proxies: [\"10.0.0.1/8\"]\n", nil, "trusted_proxies[0]"},
		{"proxy everyone", "trusted_proxies: [\"10.0.0.0/8\", \"0.0.0.0/0\"]\n", nil, "trusted_proxies[1]"},
		{"proxy everyone v6", "trusted_proxies: [\"::/0\"]\n", nil, "trusted_proxies[0]"},
		{"proxy name", "trusted_proxies: [lb.internal]\n", nil, "trusted_proxies[0]"},
		{"proxy from env", "", []string{"PORTCULLIS_TRUSTED_PROXIES=[\"x\"]"}, "trusted_proxies[0]"},
		{"signing key readable", "evidence: {signing_key: " + worldReadable + "}\n", nil, "evidence.signing_key"},
		{"bad duration", "policy: {poll_interval: soon}\n", nil, "poll_interval"},
		{"bad role", "principals:\n  - id: a\n    roles: [root]\n    api_key_sha256: " + goodHash + "\n", nil, "principals[0].roles[0]"},
		{"short hash", "principals:\n  - id: a\n    roles: [agent]\n    api_key_sha256: abc\n", nil, "principals[0].api_key_sha256"},
		{"duplicate id in another case", p("  - id: A\n    roles: [agent]\n    api_key_sha256: " + strings.Repeat("0", 64) + "\n"), nil, "principals[1].id"},
		{"duplicate id", p("  - id: a\n    roles: [agent]\n    api_key_sha256: " + strings.Repeat("0", 64) + "\n"), nil, "principals[1].id"},
		{"duplicate key", p("  - id: b\n    roles: [agent]\n    api_key_sha256: " + goodHash + "\n"), nil, "principals[1].api_key_sha256"},
		{"missing roles", "principals:\n  - id: a\n    api_key_sha256: " + goodHash + "\n", nil, "principals[0].roles"},
		{"env bool", "", []string{"PORTCULLIS_SANDBOX_REQUIRE=perhaps"}, "sandbox.require"},
		{"env int", "", []string{"PORTCULLIS_MAX_BODY_BYTES=lots"}, "max_body_bytes"},
		{"body limit range", "max_body_bytes: 10\n", nil, "max_body_bytes"},
		{"log level", "log_level: loud\n", nil, "log_level"},
		{"mcp origin", "mcp: {allowed_origins: [\"console.example.com\"]}\n", nil, "mcp.allowed_origins[0]"},
		{"token for a directory", "policy: {bundle: ./b, bearer_token_file: /nonexistent}\n", nil, "policy.bearer_token_file"},
		{"token file missing", "policy: {bundle: \"https://b.example/b.tar.gz\", bearer_token_file: /nonexistent/t}\n", nil, "policy.bearer_token_file"},
		{"token file readable", "policy: {bundle: \"https://b.example/b.tar.gz\", bearer_token_file: " + worldReadable + "}\n", nil, "policy.bearer_token_file"},
		{"poll too fast", "policy: {bundle: \"https://b.example/b.tar.gz\", poll_interval: 10ms}\n", nil, "policy.poll_interval"},
		{"key id without key", "policy: {bundle: ./b, key_id: k1}\n", nil, "policy.key_id"},
		{"key with shipped", "policy: {verification_key: /k.pem}\n", nil, "policy.verification_key"},
		{"env run_tests", "", []string{"PORTCULLIS_POLICY_RUN_TESTS=sometimes"}, "policy.run_tests"},
		{"deno missing", "tools: {deno: /nonexistent/deno}\n", nil, "tools.deno"},
		{"deno not executable", "tools: {deno: " + worldReadable + "}\n", nil, "tools.deno"},
		{"deno from env", "", []string{"PORTCULLIS_TOOLS_DENO=/nonexistent/deno"}, "tools.deno"},
		{"header timeout zero", "http: {read_header_timeout: 0s}\n", nil, "http.read_header_timeout"},
		{"read shorter than headers", "http: {read_header_timeout: 20s, read_timeout: 5s}\n", nil, "http.read_timeout"},
		{"idle timeout from env", "", []string{"PORTCULLIS_HTTP_IDLE_TIMEOUT=forever"}, "http.idle_timeout"},
		{"header bytes range", "http: {max_header_bytes: 10}\n", nil, "http.max_header_bytes"},
		{"fetch timeout range", "policy: {fetch_timeout: 1h}\n", nil, "policy.fetch_timeout"},
		{"debug all interfaces", "debug: {listen: \":6060\"}\n", nil, "debug.listen"},
		{"debug non-loopback", "debug: {listen: \"0.0.0.0:6060\"}\n", nil, "debug.listen"},
		{"debug public ip", "debug: {listen: \"10.1.2.3:6060\"}\n", nil, "debug.listen"},
		{"debug host name", "debug: {listen: \"gw.internal:6060\"}\n", nil, "debug.listen"},
		{"debug no port", "debug: {listen: 127.0.0.1}\n", nil, "debug.listen"},
		{"debug bad port", "debug: {listen: \"127.0.0.1:http\"}\n", nil, "debug.listen"},
		{"debug from env", "", []string{"PORTCULLIS_DEBUG_LISTEN=[::]:6060"}, "debug.listen"},
		{"commit timeout too short", "evidence: {commit_timeout: 10ms}\n", nil, "evidence.commit_timeout"},
		{"commit timeout from env", "", []string{"PORTCULLIS_EVIDENCE_COMMIT_TIMEOUT=1h"}, "evidence.commit_timeout"},
		{"gc percent too low", "runtime: {gc_percent: 10}\n", nil, "runtime.gc_percent"},
		{"gc off without a limit", "runtime: {gc_percent: -1}\n", nil, "runtime.gc_percent"},
		{"memory limit unit", "runtime: {memory_limit: 2GB}\n", nil, "runtime.memory_limit"},
		{"memory limit from env", "", []string{"PORTCULLIS_RUNTIME_MEMORY_LIMIT=lots"}, "runtime.memory_limit"},
		{"jwt without issuer", "auth: {jwt: {audience: a, jwks_url: \"https://idp.example/jwks\"}}\n", nil, "auth.jwt.issuer"},
		{"jwt without audience", "auth: {jwt: {issuer: i, jwks_url: \"https://idp.example/jwks\"}}\n", nil, "auth.jwt.audience"},
		{"jwt without keys", "auth: {jwt: {issuer: i, audience: a}}\n", nil, "auth.jwt.jwks_url"},
		{"jwt both key sources", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", jwks_file: /k.json}}` + "\n", nil, "auth.jwt.jwks_file"},
		{"jwt keys over http", "auth: {jwt: {issuer: i, audience: a, jwks_url: \"http://idp.example/jwks\"}}\n", nil, "auth.jwt.jwks_url"},
		{"jwt HS256", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", algorithms: [RS256, HS256]}}` + "\n", nil, "auth.jwt.algorithms[1]"},
		{"jwt none", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", algorithms: [none]}}` + "\n", nil, "auth.jwt.algorithms[0]"},
		{"jwt algorithms from env", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks"}}` + "\n", []string{"PORTCULLIS_AUTH_JWT_ALGORITHMS=[HS512]"}, "auth.jwt.algorithms[0]"},
		{"jwt leeway", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", leeway: 1h}}` + "\n", nil, "auth.jwt.leeway"},
		{"jwt refetch", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", jwks_min_refetch_interval: 1ms}}` + "\n", nil, "auth.jwt.jwks_min_refetch_interval"},
		{"jwt prefix", `auth: {jwt: {issuer: "https://idp.example/", audience: portcullis, jwks_url: "https://idp.example/jwks", principal_prefix: "` + strings.Repeat("p", 65) + `"}}` + "\n", nil, "auth.jwt.principal_prefix"},
		{"tls cert without key", "tls: {cert_file: /c.pem}\n", nil, "tls.key_file"},
		{"tls key readable", "tls: {cert_file: /c.pem, key_file: " + worldReadable + "}\n", nil, "tls.key_file"},
		{"mtls without tls", "tls: {client_ca_file: /ca.pem}\n", nil, "tls.client_ca_file"},
		{"tls 1.1", "tls: {cert_file: /c.pem, key_file: /k.pem, min_version: \"1.1\"}\n", nil, "tls.min_version"},
		{"tls reload", "tls: {cert_file: /c.pem, key_file: /k.pem, reload_interval: 1ms}\n", nil, "tls.reload_interval"},
		{"require cert without ca", "tls: {cert_file: /c.pem, key_file: /k.pem, require_client_cert: true}\n", nil, "tls.require_client_cert"},
		{"cert subject without mtls", "principals:\n  - id: a\n    roles: [agent]\n    client_cert_subject: CN=a\n", nil, "principals[0].client_cert_subject"},
		{"cert subject malformed", "tls: {cert_file: /c.pem, key_file: /k.pem, client_ca_file: /ca.pem}\nprincipals:\n  - id: a\n    roles: [agent]\n    client_cert_subject: \"dns:*.x\"\n", nil, "principals[0].client_cert_subject"},
		{"cert subject twice", "tls: {cert_file: /c.pem, key_file: /k.pem, client_ca_file: /ca.pem}\nprincipals:\n  - id: a\n    roles: [agent]\n    client_cert_subject: CN=a\n  - id: b\n    roles: [agent]\n    client_cert_subject: \"subject:CN=a\"\n", nil, "principals[1].client_cert_subject"},
		{"neither key nor cert", "principals:\n  - id: a\n    roles: [agent]\n", nil, "principals[0].api_key_sha256"},
		{"reserved attribute auth", p("") + "    attributes: {auth: jwt}\n", nil, "principals[0].attributes.auth"},
		{"reserved attribute claims", p("") + "    attributes: {claims: {}}\n", nil, "principals[0].attributes.claims"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path, tc.env)
			if err == nil {
				t.Fatalf("Load accepted %q", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.wantKey) {
				t.Errorf("error %q does not name %q", err, tc.wantKey)
			}
		})
	}
}

// worldReadable is a token file with mode 0644, which the config refuses.
var worldReadable = func() string {
	dir, err := os.MkdirTemp("", "config-test-")
	if err != nil {
		panic(err)
	}
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("t"), 0o644); err != nil {
		panic(err)
	}
	return p
}()

// TestBearerTokenFileAccepted: a private token file next to an https
// bundle URL is valid, and run_tests defaults on.
func TestBearerTokenFileAccepted(t *testing.T) {
	t.Parallel()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("", []string{"PORTCULLIS_POLICY_BUNDLE=https://bundles.example/p.tar.gz", "PORTCULLIS_POLICY_BEARER_TOKEN_FILE=" + tok})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy.BearerTokenFile != tok || !cfg.Policy.RunTests {
		t.Errorf("policy = %+v", cfg.Policy)
	}
}

func TestDefaultsValid(t *testing.T) {
	t.Parallel()
	cfg, err := Load("", nil)
	if err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.DataDir != "./.portcullis" || cfg.Sandbox.Backend != "auto" {
		t.Errorf("defaults = %+v", cfg)
	}
	// The contract: auto never means the process backend, and require
	// is on unless turned off.
	if !cfg.Sandbox.Require {
		t.Error("sandbox.require defaults to false, want true")
	}
	if uid, gid, set, err := cfg.Sandbox.RunAsIDs(); uid != 65534 || gid != 65534 || set || err != nil {
		t.Errorf("run_as default = %d:%d (set %v, %v), want 65534:65534 unset", uid, gid, set, err)
	}
}

// TestTrustedProxies: CIDRs and single addresses of either family are
// accepted; a bare address is one host.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	cfg, err := Load("", []string{`PORTCULLIS_TRUSTED_PROXIES=["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1"]`})
	if err != nil {
		t.Fatal(err)
	}
	nets, err := cfg.TrustedProxyNets()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nets {
		got = append(got, n.String())
	}
	want := []string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "::1/128"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nets (-want +got):\n%s", diff)
	}
}

// TestRunAs: numeric uid:gid for the process backend.
func TestRunAs(t *testing.T) {
	t.Parallel()
	cfg, err := Load("", []string{"PORTCULLIS_SANDBOX_BACKEND=process", "PORTCULLIS_SANDBOX_RUN_AS=1500:1501"})
	if err != nil {
		t.Fatal(err)
	}
	if uid, gid, set, err := cfg.Sandbox.RunAsIDs(); uid != 1500 || gid != 1501 || !set || err != nil {
		t.Errorf("run_as = %d:%d (set %v, %v)", uid, gid, set, err)
	}
}

// TestToolsDenoAccepted: an executable file is a valid tools.deno, from
// the file or from PORTCULLIS_TOOLS_DENO.
func TestToolsDenoAccepted(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "deno")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("", []string{"PORTCULLIS_TOOLS_DENO=" + bin})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tools.Deno != bin {
		t.Errorf("tools.deno = %q, want %q", cfg.Tools.Deno, bin)
	}
}

// TestDebugListenAccepted: loopback addresses are valid debug.listen
// values, from the file or the environment; the default is off.
func TestDebugListenAccepted(t *testing.T) {
	t.Parallel()
	if cfg := Default(); cfg.Debug.Listen != "" {
		t.Errorf("debug.listen defaults to %q, want off", cfg.Debug.Listen)
	}
	for _, addr := range []string{"127.0.0.1:6060", "127.0.0.2:0", "[::1]:6060", "localhost:6060"} {
		cfg, err := Load("", []string{"PORTCULLIS_DEBUG_LISTEN=" + addr})
		if err != nil {
			t.Errorf("debug.listen %q refused: %v", addr, err)
			continue
		}
		if cfg.Debug.Listen != addr {
			t.Errorf("debug.listen = %q, want %q", cfg.Debug.Listen, addr)
		}
	}
}

func TestMemoryLimitBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"", 0, true}, {"1024", 1024, true}, {"100B", 100, true}, {"512KiB", 512 << 10, true},
		{"768MiB", 768 << 20, true}, {" 2GiB ", 2 << 30, true}, {"1TiB", 1 << 40, true},
		{"0", 0, false}, {"-1GiB", 0, false}, {"2GB", 0, false}, {"1.5GiB", 0, false},
		{"MiB", 0, false}, {"9999999TiB", 0, false},
	} {
		got, err := Runtime{MemoryLimit: tc.in}.MemoryLimitBytes()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("MemoryLimitBytes(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestUpstreamsValidated(t *testing.T) {
	t.Parallel()
	cases := []struct{ yaml, want string }{
		{"upstreams:\n  - name: fs\n    command: [/usr/bin/node]\n", "reserved"},
		{"upstreams:\n  - name: a\n    command: [node]\n", "absolute"},
		{"upstreams:\n  - name: a\n    url: https://x/mcp\n  - name: a\n    url: https://y/mcp\n", "used twice"},
		{"upstreams:\n  - name: a\n    url: https://x/mcp\n    headers: {A: {secret: {env: X, file: /y}}}\n", "exactly one"},
		{"upstreams:\n  - name: a\n    url: https://x/mcp\n    bogus: 1\n", "bogus"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			t.Parallel()
			cfg := Default()
			err := Parse([]byte(c.yaml), &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
