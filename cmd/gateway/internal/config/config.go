// Package config reads the gateway's one YAML file, applies PORTCULLIS_*
// environment overrides and validates the result, naming the key at fault, so
// that a bad deployment fails at start rather than on the first call.
package config

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/gateway/identity"
)

// Config is the whole gateway configuration (CONTRACT section 7).
type Config struct {
	Listen      string `yaml:"listen"`
	DatabaseURL string `yaml:"database_url"`
	DataDir     string `yaml:"data_dir"`
	// InstanceID names this gateway process in evidence; a restarted
	// instance with the same id marks its own unfinished calls interrupted.
	InstanceID   string      `yaml:"instance_id"`
	LogLevel     string      `yaml:"log_level"`
	MaxBodyBytes int64       `yaml:"max_body_bytes"`
	HTTP         HTTP        `yaml:"http"`
	Policy       Policy      `yaml:"policy"`
	Evidence     Evidence    `yaml:"evidence"`
	Principals   []Principal `yaml:"principals"`
	Sandbox      Sandbox     `yaml:"sandbox"`
	Tools        Tools       `yaml:"tools"`
	MCP          MCP         `yaml:"mcp"`
	// Upstreams are the MCP servers the gateway fronts and governs
	// (docs/upstreams.md).
	Upstreams []Upstream `yaml:"upstreams"`
	Debug     Debug      `yaml:"debug"`
	Runtime   Runtime    `yaml:"runtime"`
	// TrustedProxies are the CIDRs (or single addresses) of the reverse
	// proxies whose X-Forwarded-For is believed. A request from any other
	// peer is attributed to its TCP peer address, whatever headers it
	// sends; from a trusted peer, to the rightmost X-Forwarded-For address
	// that is not itself a trusted proxy (CONTRACT section 11).
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Auth configures credentials beside API keys: JWTs from an identity
	// provider (CONTRACT section 11).
	Auth Auth `yaml:"auth"`
	// TLS makes the gateway serve HTTPS itself, and mTLS with a client CA.
	TLS TLS `yaml:"tls"`
	// Approvals configures how parked calls wait (CONTRACT section 9).
	Approvals Approvals `yaml:"approvals"`
}

// Approvals configures human approval (docs/approvals.md).
type Approvals struct {
	// MCPWait is how long an MCP tools/call waits for a parked call's
	// approval before answering with the approval id (default 60s).
	MCPWait Duration `yaml:"mcp_wait"`
	// WebhookURL, when set, receives a JSON POST per new pending approval
	// (http(s); best effort, never blocks the call).
	WebhookURL string `yaml:"webhook_url"`
}

// Auth configures authentication beside API keys (docs/authentication.md).
type Auth struct {
	JWT JWT `yaml:"jwt"`
}

// JWT configures bearer JWTs verified against an issuer's JWKS. It is on
// when jwks_url or jwks_file is set; then issuer and audience must be too.
type JWT struct {
	// Issuer is the exact iss the tokens must carry.
	Issuer string `yaml:"issuer"`
	// Audience must be one of the tokens' aud values.
	Audience string `yaml:"audience"`
	// JWKSURL (https, or http to loopback) or JWKSFile holds the
	// issuer's public keys.
	JWKSURL  string `yaml:"jwks_url"`
	JWKSFile string `yaml:"jwks_file"`
	// Algorithms is the allowlist (empty: RS256, ES256, EdDSA). HMAC
	// algorithms and none are never accepted.
	Algorithms []string `yaml:"algorithms"`
	// PrincipalClaim is the claim naming the principal (default sub);
	// RolesClaim the one holding its roles (empty: tokens carry none).
	PrincipalClaim string `yaml:"principal_claim"`
	RolesClaim     string `yaml:"roles_claim"`
	// PrincipalPrefix is put before the claim's value to make the
	// principal id (e.g. "oidc:"). A token whose id equals a configured
	// principal's is refused whatever the prefix.
	PrincipalPrefix string `yaml:"principal_prefix"`
	// Leeway is the clock skew allowed on exp, nbf and iat.
	Leeway Duration `yaml:"leeway"`
	// JWKSRefreshInterval is how often the key set is refetched.
	JWKSRefreshInterval Duration `yaml:"jwks_refresh_interval"`
	// JWKSMinRefetchInterval bounds refetches triggered by tokens with an
	// unknown kid (a rotation): at most one per interval.
	JWKSMinRefetchInterval Duration `yaml:"jwks_min_refetch_interval"`
	// JWKSFetchTimeout bounds one fetch of the key set.
	JWKSFetchTimeout Duration `yaml:"jwks_fetch_timeout"`
}

// Enabled reports whether JWT authentication is configured.
func (j JWT) Enabled() bool { return j.JWKSURL != "" || j.JWKSFile != "" }

// TLS configures HTTPS on the listener.
type TLS struct {
	// CertFile and KeyFile (PEM) are the server's certificate chain and
	// key, reloaded when the files change.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile (PEM) turns on mTLS: client certificates are verified
	// against it (also reloaded) and mapped to principals by
	// principals[].client_cert_subject.
	ClientCAFile string `yaml:"client_ca_file"`
	// RequireClientCert refuses, at the handshake, every client without a
	// certificate client_ca_file verifies (default false: a certificate
	// is optional and bearer credentials work beside it).
	RequireClientCert bool `yaml:"require_client_cert"`
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string `yaml:"min_version"`
	// ReloadInterval is how often the files are checked for change.
	ReloadInterval Duration `yaml:"reload_interval"`
}

// Enabled reports whether the listener serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Runtime tunes the Go runtime's garbage collector for serve. The standard
// GOGC and GOMEMLIMIT variables, when set, win over these.
type Runtime struct {
	// GCPercent is GOGC: how much the heap may grow over the live heap
	// before a collection. The gateway's live heap is small but holds the
	// compiled policy, which every cycle scans, so fewer cycles buy much
	// CPU for a little memory (docs/performance.md#garbage-collection).
	// -1 turns the proportional trigger off, which needs MemoryLimit.
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimit is GOMEMLIMIT, a soft limit on the Go heap and runtime
	// (e.g. 512MiB, 2GiB); empty sets none. In a container, set it to
	// about 80% of the container's memory.
	MemoryLimit string `yaml:"memory_limit"`
}

// MemoryLimitBytes parses MemoryLimit in GOMEMLIMIT's syntax: a number of
// bytes with an optional B, KiB, MiB, GiB or TiB suffix. 0 when empty.
func (r Runtime) MemoryLimitBytes() (int64, error) {
	s := strings.TrimSpace(r.MemoryLimit)
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("want a positive size such as 512MiB or 2GiB, got %q", r.MemoryLimit)
	}
	return n * mult, nil
}

// Debug configures the opt-in diagnostics listener.
type Debug struct {
	// Listen, when set, serves net/http/pprof on its own loopback-only
	// server (host:port); empty (the default) serves nothing. It has no
	// authentication, so a non-loopback address is refused.
	Listen string `yaml:"listen"`
}

// HTTP bounds the API server's connections, so slow or hostile clients
// (slowloris, idle floods, huge headers) cannot hold the gateway's memory or
// goroutines for long.
type HTTP struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a request from the end of its headers to the end
	// of the answer; it must outlast the longest Exec (600 s).
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers; more is 431.
	MaxHeaderBytes int64 `yaml:"max_header_bytes"`
}

// MCP configures the /mcp endpoint.
type MCP struct {
	// AllowedOrigins are the browser origins (scheme://host[:port]) that
	// may call /mcp; a request with any other Origin header is refused
	// (DNS-rebinding defence). Clients that send no Origin are unaffected.
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// Tools configures built-in tools that need something outside the gateway.
type Tools struct {
	// Deno is the deno binary code.run runs (PORTCULLIS_TOOLS_DENO).
	// Empty: PORTCULLIS_DENO, then ./.tools (where the test command
	// installs it), then deno on PATH; none found means code.run answers
	// backend_unavailable.
	Deno string `yaml:"deno"`
}

// Policy says where the Rego bundle comes from.
type Policy struct {
	Bundle          string   `yaml:"bundle"`
	VerificationKey string   `yaml:"verification_key"`
	KeyID           string   `yaml:"key_id"`
	PollInterval    Duration `yaml:"poll_interval"`
	ShadowBundle    string   `yaml:"shadow_bundle"`
	// BearerTokenFile holds the token sent to an http(s) bundle service.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// RunTests makes every bundle pass its own Rego tests before it goes
	// live (default true).
	RunTests bool `yaml:"run_tests"`
	// FetchTimeout bounds one fetch from an http(s) bundle service; a
	// slower service counts as a failed fetch (the live policy stays).
	FetchTimeout Duration `yaml:"fetch_timeout"`
}

// Evidence configures the receipt store's integrity features.
type Evidence struct {
	SigningKey         string   `yaml:"signing_key"`
	CheckpointInterval Duration `yaml:"checkpoint_interval"`
	CheckpointDir      string   `yaml:"checkpoint_dir"`
	Retention          Duration `yaml:"retention"`
	// CommitTimeout bounds one group commit of evidence: a store that does
	// not commit within it (down, stalled, locked) counts as unavailable,
	// and the calls waiting on it are refused evidence_unavailable.
	CommitTimeout Duration `yaml:"commit_timeout"`
	// ResultsRetention is how long calls' full outputs are kept (redacted,
	// under data_dir/results) for read_tool_result; 0 keeps none and the
	// tool is not offered.
	ResultsRetention Duration `yaml:"results_retention"`
	// ResultsMaxBytes bounds one kept output (its JSON, after redaction);
	// a larger one is kept only as a note that it was too large.
	ResultsMaxBytes int64 `yaml:"results_max_bytes"`
}

// Principal is a configured caller; only the SHA-256 of its key is stored.
// It authenticates by its API key, by a client certificate
// (ClientCertSubject, with tls.client_ca_file), or either.
type Principal struct {
	ID           string         `yaml:"id" json:"id"`
	Roles        []string       `yaml:"roles" json:"roles"`
	Attributes   map[string]any `yaml:"attributes" json:"attributes"`
	APIKeySHA256 string         `yaml:"api_key_sha256" json:"api_key_sha256"`
	// ClientCertSubject binds client certificates to this principal: a
	// subject DN as RFC 2253 renders it (CN=agent-7,O=Example), or a SAN
	// as dns:NAME, uri:URI or email:ADDRESS.
	ClientCertSubject string `yaml:"client_cert_subject" json:"client_cert_subject"`
}

// Sandbox chooses the OS sandbox that Exec and code.run run in.
type Sandbox struct {
	// Backend is auto, bwrap, seatbelt or process. auto is bwrap on Linux
	// and seatbelt on macOS when the start-up probe passes; otherwise Exec
	// and code.run are refused (sandbox_unavailable). The process backend,
	// which confines nothing but resources, runs only when named here.
	Backend string `yaml:"backend"`
	Require bool   `yaml:"require"`
	// RunAs is the "uid:gid" the process backend runs programs as when the
	// gateway runs as root (default 65534:65534, nobody), so that they
	// cannot read the gateway's config, keys, evidence or memory. Only for
	// backend process; uid and gid 0 are refused.
	RunAs string `yaml:"run_as"`
	// MaskMaxEntries and MaskMaxDirs bound the granted trees one call may
	// cover under bwrap: secret-shaped files are hidden at every depth, so
	// a call whose trees are larger is refused. 0: the defaults (200000
	// and 20000).
	MaskMaxEntries int `yaml:"mask_max_entries"`
	MaskMaxDirs    int `yaml:"mask_max_dirs"`
	// StateRetention is how long a per-session @state directory (under
	// data_dir/state) that no call used is kept before it is swept.
	StateRetention Duration `yaml:"state_retention"`
	// StateMaxPerPrincipal caps the @state directories one principal holds
	// at a time (session ids are the caller's). 0: the default, 256.
	StateMaxPerPrincipal int `yaml:"state_max_per_principal"`
}

// DefaultRunAs is the process backend's uid and gid under a root gateway.
const DefaultRunAs = 65534

// RunAsIDs parses RunAs; ok is false when it is empty (use the default).
func (s Sandbox) RunAsIDs() (uid, gid uint32, ok bool, err error) {
	v := strings.TrimSpace(s.RunAs)
	if v == "" {
		return DefaultRunAs, DefaultRunAs, false, nil
	}
	us, gs, found := strings.Cut(v, ":")
	if !found {
		return 0, 0, false, fmt.Errorf("want numeric uid:gid such as 65534:65534, got %q", s.RunAs)
	}
	u, err1 := strconv.ParseUint(us, 10, 32)
	g, err2 := strconv.ParseUint(gs, 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return 0, 0, false, fmt.Errorf("want numeric uid:gid such as 65534:65534, got %q", s.RunAs)
	case u == 0 || g == 0:
		return 0, 0, false, fmt.Errorf("uid and gid 0 are root; want an unprivileged uid:gid, got %q", s.RunAs)
	case u == math.MaxUint32 || g == math.MaxUint32:
		return 0, 0, false, fmt.Errorf("uid or gid 4294967295 is \"no id\" to the kernel, got %q", s.RunAs)
	}
	return uint32(u), uint32(g), true, nil
}

// TrustedProxyNets parses TrustedProxies: CIDRs, or single addresses taken
// as /32 or /128.
func (c Config) TrustedProxyNets() ([]*net.IPNet, error) {
	out := make([]*net.IPNet, 0, len(c.TrustedProxies))
	for i, s := range c.TrustedProxies {
		n, err := parseProxy(s)
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies[%d]: %w", i, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseProxy(s string) (*net.IPNet, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("want a CIDR such as 10.0.0.0/8 or an address, got %q", s)
		}
		if !ip.Equal(n.IP) {
			return nil, fmt.Errorf("%q has host bits set; did you mean %s?", s, n)
		}
		if ones, _ := n.Mask.Size(); ones == 0 {
			return nil, fmt.Errorf("%q trusts every address, so any client could forge its address; name your proxies", s)
		}
		return n, nil
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, fmt.Errorf("want a CIDR such as 10.0.0.0/8 or an address, got %q", s)
	}
	bits := 128
	if ip4 := ip.To4(); ip4 != nil {
		ip, bits = ip4, 32
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, nil
}

// Duration is a time.Duration that also accepts a "d" (days) suffix, since
// retention periods are written in days.
type Duration time.Duration

// UnmarshalYAML accepts "30s", "10m", "400d".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if err := d.set(n.Value); err != nil {
		return &lineError{line: n.Line, err: err}
	}
	return nil
}

// lineError carries the YAML line of a bad value so Parse can name its key.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return e.err.Error() }

func (d *Duration) set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*d = 0
		return nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil {
			return fmt.Errorf("invalid duration %q: want e.g. 30s, 10m, 400d", s)
		}
		*d = Duration(time.Duration(n * float64(24*time.Hour)))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q: want e.g. 30s, 10m, 400d", s)
	}
	*d = Duration(v)
	return nil
}

// Std returns the value as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// ShippedBundle as policy.bundle names the policy library compiled into the
// binary (policies/bundle in the source tree).
const ShippedBundle = "shipped"

// Default returns the configuration used when a key is not set.
func Default() Config {
	return Config{
		Listen:       "127.0.0.1:8080",
		DataDir:      "./.portcullis",
		LogLevel:     "info",
		MaxBodyBytes: 8 << 20,
		HTTP: HTTP{
			ReadHeaderTimeout: Duration(10 * time.Second),
			ReadTimeout:       Duration(60 * time.Second),
			WriteTimeout:      Duration(11 * time.Minute),
			IdleTimeout:       Duration(120 * time.Second),
			MaxHeaderBytes:    64 << 10,
		},
		Policy: Policy{Bundle: ShippedBundle, PollInterval: Duration(30 * time.Second), RunTests: true,
			FetchTimeout: Duration(60 * time.Second)},
		Evidence: Evidence{
			CheckpointInterval: Duration(10 * time.Second),
			Retention:          Duration(400 * 24 * time.Hour),
			CommitTimeout:      Duration(10 * time.Second),
			ResultsRetention:   Duration(24 * time.Hour),
			ResultsMaxBytes:    1 << 20,
		},
		Sandbox:   Sandbox{Backend: "auto", Require: true, StateRetention: Duration(7 * 24 * time.Hour)},
		Runtime:   Runtime{GCPercent: 400},
		Approvals: Approvals{MCPWait: Duration(60 * time.Second)},
		Auth: Auth{JWT: JWT{
			PrincipalClaim:         "sub",
			Leeway:                 Duration(60 * time.Second),
			JWKSRefreshInterval:    Duration(10 * time.Minute),
			JWKSMinRefetchInterval: Duration(time.Minute),
			JWKSFetchTimeout:       Duration(10 * time.Second),
		}},
		TLS: TLS{MinVersion: "1.2", ReloadInterval: Duration(5 * time.Second)},
	}
}

// Load reads path (may be empty: defaults only), applies environment
// overrides from environ and validates.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if err := Parse(b, &cfg); err != nil {
			return Config{}, err
		}
	}
	if err := ApplyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Parse decodes YAML strictly into cfg: an unknown key is an error naming it.
func Parse(b []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(cfg)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var le *lineError
	if errors.As(err, &le) {
		var root yaml.Node
		if yaml.Unmarshal(b, &root) == nil {
			if key := keyAtLine(&root, le.line, ""); key != "" {
				return fmt.Errorf("config: %s: %w", key, le.err)
			}
		}
		return fmt.Errorf("config: line %d: %w", le.line, le.err)
	}
	return fmt.Errorf("config: %w", err)
}

// keyAtLine finds the dotted key whose scalar value sits on line.
func keyAtLine(n *yaml.Node, line int, path string) string {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for i, c := range n.Content {
			p := path
			if n.Kind == yaml.SequenceNode {
				p = fmt.Sprintf("%s[%d]", path, i)
			}
			if k := keyAtLine(c, line, p); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if v.Kind == yaml.ScalarNode && v.Line == line {
				return p
			}
			if found := keyAtLine(v, line, p); found != "" {
				return found
			}
		}
	}
	return ""
}

// ApplyEnv overrides cfg from PORTCULLIS_<KEY> variables, KEY being the YAML
// path upper-cased and joined with "_" (PORTCULLIS_POLICY_BUNDLE). The
// principal list is taken whole from PORTCULLIS_PRINCIPALS as YAML or JSON.
func ApplyEnv(cfg *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "PORTCULLIS_") {
			env[k] = v
		}
	}
	return applyEnv(reflect.ValueOf(cfg).Elem(), "PORTCULLIS", "", env)
}

func applyEnv(v reflect.Value, prefix, path string, env map[string]string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		name := prefix + "_" + strings.ToUpper(tag)
		key := tag
		if path != "" {
			key = path + "." + tag
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct {
			if err := applyEnv(fv, name, key, env); err != nil {
				return err
			}
			continue
		}
		raw, ok := env[name]
		if !ok {
			continue
		}
		if err := setFromString(fv, raw); err != nil {
			return fmt.Errorf("config: %s (from %s): %w", key, name, err)
		}
	}
	return nil
}

func setFromString(fv reflect.Value, raw string) error {
	if d, ok := fv.Addr().Interface().(*Duration); ok {
		return d.set(raw)
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", raw)
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", raw)
		}
		fv.SetInt(n)
	case reflect.Slice:
		p := reflect.New(fv.Type())
		dec := yaml.NewDecoder(strings.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(p.Interface()); err != nil {
			return fmt.Errorf("want a YAML or JSON list: %w", err)
		}
		fv.Set(p.Elem())
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}

// Validate checks every key and names the first one at fault.
func (c *Config) Validate() error {
	var p problems
	c.validateServer(&p)
	c.validatePolicy(&p)
	c.validateEvidence(&p)
	c.validateSandbox(&p)
	c.validateRuntime(&p)
	c.validatePrincipals(&p)
	c.validateApprovals(&p)
	errs := append(p.errs, c.validateAuth()...)
	errs = append(errs, c.validateTLS()...)
	errs = append(errs, c.validateUpstreams()...)
	return errors.Join(errs...)
}

func (c *Config) validateApprovals(p *problems) {
	if w := c.Approvals.MCPWait; w < 0 || w.Std() > 10*time.Minute {
		p.bad("approvals.mcp_wait", "want a duration from 0 to 10m")
	}
	if u := c.Approvals.WebhookURL; u != "" {
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" || parsed.User != nil {
			p.bad("approvals.webhook_url", "want an http(s) URL without credentials")
		}
	}
}

// problems collects what Validate finds, each naming its key.
type problems struct{ errs []error }

func (p *problems) bad(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
}

func (p *problems) durationIn(key string, d Duration, lo, hi time.Duration) {
	if d.Std() < lo || d.Std() > hi {
		p.bad(key, "want %s..%s, got %s", lo, hi, d.Std())
	}
}

// validateServer checks the listener, store, data directory, log level
// and HTTP bounds.
func (c *Config) validateServer(p *problems) {
	if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		p.bad("listen", "want host:port, got %q", c.Listen)
	} else if _, err := strconv.Atoi(port); err != nil {
		p.bad("listen", "port %q is not a number", port)
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		p.bad("database_url", "want empty (embedded store) or a postgres:// URL")
	}
	if c.DataDir == "" {
		p.bad("data_dir", "must not be empty")
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		p.bad("log_level", "want debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 64<<20 {
		p.bad("max_body_bytes", "want 1024..67108864, got %d", c.MaxBodyBytes)
	}
	p.durationIn("http.read_header_timeout", c.HTTP.ReadHeaderTimeout, 100*time.Millisecond, 10*time.Minute)
	p.durationIn("http.read_timeout", c.HTTP.ReadTimeout, 100*time.Millisecond, time.Hour)
	p.durationIn("http.write_timeout", c.HTTP.WriteTimeout, time.Second, 24*time.Hour)
	p.durationIn("http.idle_timeout", c.HTTP.IdleTimeout, 100*time.Millisecond, 24*time.Hour)
	if c.HTTP.ReadTimeout < c.HTTP.ReadHeaderTimeout {
		p.bad("http.read_timeout", "must not be shorter than http.read_header_timeout (%s), got %s", c.HTTP.ReadHeaderTimeout.Std(), c.HTTP.ReadTimeout.Std())
	}
	if c.HTTP.MaxHeaderBytes < 4096 || c.HTTP.MaxHeaderBytes > 1<<20 {
		p.bad("http.max_header_bytes", "want 4096..1048576, got %d", c.HTTP.MaxHeaderBytes)
	}
}

// validatePolicy checks where the policy comes from and how it is trusted.
func (c *Config) validatePolicy(p *problems) {
	if c.Policy.Bundle == "" {
		p.bad("policy.bundle", "must name a bundle directory")
	}
	p.durationIn("policy.fetch_timeout", c.Policy.FetchTimeout, 100*time.Millisecond, 10*time.Minute)
	if c.Policy.PollInterval < 0 {
		p.bad("policy.poll_interval", "must not be negative")
	}
	remote := strings.HasPrefix(c.Policy.Bundle, "http://") || strings.HasPrefix(c.Policy.Bundle, "https://")
	if remote && c.Policy.PollInterval > 0 && c.Policy.PollInterval.Std() < time.Second {
		p.bad("policy.poll_interval", "want at least 1s for a bundle service, got %s", c.Policy.PollInterval.Std())
	}
	if c.Policy.BearerTokenFile != "" {
		if !remote {
			p.bad("policy.bearer_token_file", "only applies to an http(s) policy.bundle")
		} else if err := privateFile(c.Policy.BearerTokenFile); err != nil {
			p.bad("policy.bearer_token_file", "%v", err)
		}
	}
	if c.Policy.KeyID != "" && c.Policy.VerificationKey == "" {
		p.bad("policy.key_id", "set without policy.verification_key")
	}
	if c.Policy.VerificationKey != "" && c.Policy.Bundle == ShippedBundle {
		p.bad("policy.verification_key", "the shipped policy is not signed; point policy.bundle at a signed bundle")
	}
}

// validateEvidence checks the evidence intervals and bounds, and that an
// existing signing key is private.
func (c *Config) validateEvidence(p *problems) {
	if c.Evidence.CheckpointInterval < 0 {
		p.bad("evidence.checkpoint_interval", "must not be negative")
	}
	if c.Evidence.Retention < 0 {
		p.bad("evidence.retention", "must not be negative")
	}
	if c.Evidence.CommitTimeout < Duration(100*time.Millisecond) || c.Evidence.CommitTimeout > Duration(5*time.Minute) {
		p.bad("evidence.commit_timeout", "want 100ms to 5m, got %s", time.Duration(c.Evidence.CommitTimeout))
	}
	if c.Evidence.ResultsRetention < 0 || c.Evidence.ResultsRetention > Duration(400*24*time.Hour) {
		p.bad("evidence.results_retention", "want 0 (keep none) to 400d, got %s", time.Duration(c.Evidence.ResultsRetention))
	}
	if c.Evidence.ResultsMaxBytes < 1024 || c.Evidence.ResultsMaxBytes > 64<<20 {
		p.bad("evidence.results_max_bytes", "want 1024..67108864, got %d", c.Evidence.ResultsMaxBytes)
	}
	// A missing key file is reported by whoever reads it (serve, verify);
	// one that exists must be private.
	if f := c.Evidence.SigningKey; f != "" {
		if err := privateFile(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			p.bad("evidence.signing_key", "%v", err)
		}
	}
}

// validateSandbox checks the sandbox backend and its bounds, the trusted
// proxies and the tools' binaries.
func (c *Config) validateSandbox(p *problems) {
	switch c.Sandbox.Backend {
	case "auto", "bwrap", "seatbelt", "process":
	default:
		p.bad("sandbox.backend", "want auto, bwrap, seatbelt or process, got %q", c.Sandbox.Backend)
	}
	if _, _, set, err := c.Sandbox.RunAsIDs(); err != nil {
		p.bad("sandbox.run_as", "%v", err)
	} else if set && c.Sandbox.Backend != "process" {
		p.bad("sandbox.run_as", "only applies to sandbox.backend: process (bwrap and seatbelt choose the sandbox user themselves)")
	}
	if _, err := c.TrustedProxyNets(); err != nil {
		p.errs = append(p.errs, fmt.Errorf("config: %w", err))
	}
	if r := c.Sandbox.StateRetention; r < Duration(time.Hour) || r > Duration(400*24*time.Hour) {
		p.bad("sandbox.state_retention", "want 1h to 400d (longer than any call runs), got %s", time.Duration(r))
	}
	if n := c.Sandbox.StateMaxPerPrincipal; n < 0 || n > 1_000_000 {
		p.bad("sandbox.state_max_per_principal", "want 0 (the default, 256) to 1000000, got %d", n)
	}
	if n := c.Sandbox.MaskMaxEntries; n < 0 || n > 10_000_000 {
		p.bad("sandbox.mask_max_entries", "want 0 (the default, 200000) to 10000000, got %d", n)
	}
	if n := c.Sandbox.MaskMaxDirs; n < 0 || n > 1_000_000 {
		p.bad("sandbox.mask_max_dirs", "want 0 (the default, 20000) to 1000000, got %d", n)
	}
	if d := c.Tools.Deno; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			p.bad("tools.deno", "want the path of an executable deno binary, got %q", d)
		}
	}
}

// validateRuntime checks the Go runtime's tuning, the debug listener and
// the MCP origins.
func (c *Config) validateRuntime(p *problems) {
	limit, err := c.Runtime.MemoryLimitBytes()
	if err != nil {
		p.bad("runtime.memory_limit", "%v", err)
	}
	switch {
	case c.Runtime.GCPercent == -1 && limit == 0 && err == nil:
		p.bad("runtime.gc_percent", "-1 (collections only at the memory limit) needs runtime.memory_limit")
	case c.Runtime.GCPercent < -1 || (c.Runtime.GCPercent >= 0 && c.Runtime.GCPercent < 25) || c.Runtime.GCPercent > 10000:
		p.bad("runtime.gc_percent", "want 25 to 10000, or -1 with runtime.memory_limit, got %d", c.Runtime.GCPercent)
	}
	if c.Debug.Listen != "" {
		if err := loopbackAddr(c.Debug.Listen); err != nil {
			p.bad("debug.listen", "%v (the pprof listener has no authentication, so it must be loopback-only)", err)
		}
	}
	for i, o := range c.MCP.AllowedOrigins {
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			p.bad(fmt.Sprintf("mcp.allowed_origins[%d]", i), "want an origin like https://console.example.com[:port], got %q", o)
		}
	}
}

// validatePrincipals checks each principal (unique id, roles, reserved
// attributes, one credential binding) and normalizes its key hash.
func (c *Config) validatePrincipals(p *problems) {
	ids := map[string]bool{}
	keys := map[string]string{}
	subjects := map[string]string{}
	for i, pr := range c.Principals {
		key := fmt.Sprintf("principals[%d]", i)
		if pr.ID == "" {
			p.bad(key+".id", "must not be empty")
		} else if ids[identity.IDKey(pr.ID)] {
			p.bad(key+".id", "duplicate principal %q (ids that differ only in case or Unicode form are one id)", pr.ID)
		}
		ids[identity.IDKey(pr.ID)] = true
		if len(pr.Roles) == 0 {
			p.bad(key+".roles", "want at least one of agent, auditor, admin, approver")
		}
		for _, a := range reservedAttributes {
			if _, ok := pr.Attributes[a]; ok {
				p.bad(key+".attributes."+a, "reserved: the gateway sets it on every authenticated principal (docs/authentication.md)")
			}
		}
		for j, r := range pr.Roles {
			if r != "agent" && r != "auditor" && r != "admin" && r != "approver" {
				p.bad(fmt.Sprintf("%s.roles[%d]", key, j), "want agent, auditor, admin or approver, got %q", r)
			}
		}
		if pr.ClientCertSubject != "" {
			m, err := identity.MatchKey(pr.ClientCertSubject)
			switch {
			case err != nil:
				p.bad(key+".client_cert_subject", "%v", err)
			case c.TLS.ClientCAFile == "":
				p.bad(key+".client_cert_subject", "needs tls.client_ca_file (client certificates are only requested with mTLS on)")
			case subjects[m] != "":
				p.bad(key+".client_cert_subject", "same certificate binding as principal %q", subjects[m])
			default:
				subjects[m] = pr.ID
			}
			if pr.APIKeySHA256 == "" {
				continue // certificate-only principal
			}
		}
		h := strings.ToLower(pr.APIKeySHA256)
		if b, err := hex.DecodeString(h); err != nil || len(b) != 32 {
			p.bad(key+".api_key_sha256", "want the 64-hex-digit SHA-256 of the key (gateway keys hash KEY), or client_cert_subject for a certificate-only principal")
		} else if other, dup := keys[h]; dup {
			p.bad(key+".api_key_sha256", "same key as principal %q", other)
		}
		keys[h] = pr.ID
		c.Principals[i].APIKeySHA256 = h
	}
}

// reservedAttributes are the principal attributes the gateway sets itself
// (how the caller authenticated, a JWT's claims): configured principals may
// not set them, so a policy reading them reads the gateway's word.
var reservedAttributes = []string{identity.AttrAuth, identity.AttrClaims}

func (c *Config) validateAuth() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: auth.jwt.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	j := c.Auth.JWT
	if !j.Enabled() {
		if j.Issuer != "" || j.Audience != "" {
			bad("jwks_url", "issuer/audience set but no jwks_url or jwks_file: JWTs would not be verified against anything")
		}
		return errs
	}
	if j.JWKSURL != "" && j.JWKSFile != "" {
		bad("jwks_file", "set either jwks_url or jwks_file, not both")
	}
	if j.JWKSURL != "" {
		if err := identity.CheckJWKSURL(j.JWKSURL); err != nil {
			bad("jwks_url", "%v", err)
		}
	}
	if j.Issuer == "" {
		bad("issuer", "must be set: the exact iss of the tokens")
	}
	if j.Audience == "" {
		bad("audience", "must be set: without it, a token the issuer made for any other application would be accepted")
	}
	for i, a := range j.Algorithms {
		if !slices.Contains(identity.SupportedAlgorithms, a) {
			bad(fmt.Sprintf("algorithms[%d]", i), "want one of %s, got %q (HMAC algorithms and none are never accepted)", strings.Join(identity.SupportedAlgorithms, ", "), a)
		}
	}
	if j.PrincipalClaim == "" {
		bad("principal_claim", "must not be empty (default sub)")
	}
	if len(j.PrincipalPrefix) > 64 || strings.ContainsFunc(j.PrincipalPrefix, unicode.IsControl) {
		bad("principal_prefix", "want at most 64 printable characters, got %q", j.PrincipalPrefix)
	}
	in := func(key string, d Duration, lo, hi time.Duration) {
		if d.Std() < lo || d.Std() > hi {
			bad(key, "want %s..%s, got %s", lo, hi, d.Std())
		}
	}
	in("leeway", j.Leeway, 0, 5*time.Minute)
	in("jwks_refresh_interval", j.JWKSRefreshInterval, time.Minute, 24*time.Hour)
	in("jwks_min_refetch_interval", j.JWKSMinRefetchInterval, time.Second, time.Hour)
	in("jwks_fetch_timeout", j.JWKSFetchTimeout, time.Second, time.Minute)
	return errs
}

func (c *Config) validateTLS() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: tls.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad("key_file", "tls.cert_file and tls.key_file go together")
	}
	if t.ClientCAFile != "" && t.CertFile == "" {
		bad("client_ca_file", "mTLS needs TLS: set tls.cert_file and tls.key_file")
	}
	if t.RequireClientCert && t.ClientCAFile == "" {
		bad("require_client_cert", "needs tls.client_ca_file")
	}
	if _, err := t.MinTLSVersion(); err != nil {
		bad("min_version", "%v", err)
	}
	if t.ReloadInterval.Std() < time.Second || t.ReloadInterval.Std() > time.Hour {
		bad("reload_interval", "want 1s..1h, got %s", t.ReloadInterval.Std())
	}
	// A missing key file is reported by serve; one that exists must be
	// private, like every key the gateway reads.
	if t.KeyFile != "" {
		if err := privateFile(t.KeyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			bad("key_file", "%v", err)
		}
	}
	return errs
}

// MinTLSVersion parses MinVersion.
func (t TLS) MinTLSVersion() (uint16, error) {
	switch strings.TrimSpace(t.MinVersion) {
	case "", "1.2":
		return tls.VersionTLS12, nil
	case "1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("want 1.2 or 1.3, got %q", t.MinVersion)
}

// privateFile checks that path is a regular file that neither group nor
// others may read or write: a key file any local user (or a program the
// process backend runs as another user) could read is not a secret.
func privateFile(path string) error { return identity.CheckKeyFile(path) }

// loopbackAddr accepts host:port with a numeric port whose host is a
// loopback IP literal or "localhost"; an empty host (all interfaces), a host
// name or any other address is refused.
func loopbackAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port on loopback (e.g. 127.0.0.1:6060), got %q", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number", port)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("want a loopback address (127.0.0.1, ::1 or localhost), got %q", addr)
	}
	return nil
}
