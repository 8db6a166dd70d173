// Package upstream fronts the MCP servers the gateway governs (contract §8):
// stdio servers it launches in the sandbox and supervises, and Streamable
// HTTP servers it reaches through the egress checks. Each upstream tool is a
// tools.Tool named "<upstream>.<tool>", so that its calls take the gateway's
// one pipeline (authenticate, validate against the upstream's inputSchema,
// decide, record, dispatch, record). The protocol is the official Go SDK's
// (github.com/modelcontextprotocol/go-sdk), never hand-written here.
package upstream

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
)

// Spec configures one upstream (config key upstreams[]).
type Spec struct {
	// Name is the namespace of the upstream's tools: [a-z][a-z0-9_-]{0,31},
	// none of the reserved names (fs, code, http, exec, mcp, v1).
	Name string
	// Command is the stdio server's argv; argv[0] absolute.
	Command []string
	// Env is set in the stdio server's environment (besides the sandbox's
	// own minimal one).
	Env map[string]string
	// Secrets are set in the stdio server's environment from references;
	// their values never leave the gateway otherwise.
	Secrets map[string]SecretRef
	// URL is the Streamable HTTP endpoint (http or https).
	URL string
	// Headers are sent on every request to URL.
	Headers map[string]Header
	// Timeout bounds one call (default 30s).
	Timeout time.Duration
	// AllowNetworks are CIDRs (e.g. 127.0.0.1/32) the http upstream may
	// resolve to although they are private or loopback: the egress checks
	// refuse those unless granted here.
	AllowNetworks []string
}

// SecretRef names where a secret's value is read: an environment variable
// of the gateway or a file. The value is read at launch and at connect,
// never stored in config, evidence or logs.
type SecretRef struct {
	Env  string
	File string
}

// Header is one header of an http upstream: a plain value, or a secret
// with an optional prefix ("Bearer ").
type Header struct {
	Value  string
	Secret *SecretRef
	Prefix string
}

// Transport names.
const (
	TransportStdio = "stdio"
	TransportHTTP  = "http"
)

// DefaultTimeout bounds one upstream call when the spec sets none.
const DefaultTimeout = 30 * time.Second

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// reserved are the names an upstream may not take: the built-in tools'
// namespaces and the gateway's own routes.
var reserved = map[string]bool{"fs": true, "code": true, "http": true, "exec": true, "mcp": true, "v1": true}

// Transport is the spec's transport: stdio (Command) or http (URL).
func (s Spec) Transport() string {
	if s.URL != "" {
		return TransportHTTP
	}
	return TransportStdio
}

// Validate checks the spec, naming the field at fault. It reads no secret.
func (s Spec) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !nameRE.MatchString(s.Name) {
		bad("name %q must match [a-z][a-z0-9_-]{0,31}", s.Name)
	} else if reserved[s.Name] {
		bad("name %q is reserved (fs, code, http, exec, mcp, v1)", s.Name)
	}
	switch {
	case len(s.Command) > 0 && s.URL != "":
		bad("command and url are exclusive: a stdio server or a Streamable HTTP one")
	case len(s.Command) == 0 && s.URL == "":
		bad("one of command (stdio) or url (Streamable HTTP) is required")
	case len(s.Command) > 0:
		if !strings.HasPrefix(s.Command[0], "/") {
			bad("command[0] %q must be an absolute path (no $PATH lookup)", s.Command[0])
		}
		if len(s.Headers) > 0 {
			bad("headers are for url upstreams; a stdio server takes env and secrets")
		}
	default:
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			bad("url %q must be an http(s) URL without credentials", s.URL)
		}
		if len(s.Env) > 0 || len(s.Secrets) > 0 {
			bad("env and secrets are for stdio upstreams; an url upstream takes headers")
		}
	}
	for k, ref := range s.Secrets {
		if err := ref.validate(); err != nil {
			bad("secrets.%s: %v", k, err)
		}
	}
	for k, h := range s.Headers {
		if (h.Value == "") == (h.Secret == nil) {
			bad("headers.%s: exactly one of value or secret", k)
		} else if h.Secret != nil {
			if err := h.Secret.validate(); err != nil {
				bad("headers.%s.secret: %v", k, err)
			}
		}
	}
	if s.Timeout < 0 || s.Timeout > 10*time.Minute {
		bad("timeout %s must be within 0 (default 30s) and 10m", s.Timeout)
	}
	return errors.Join(errs...)
}

func (r SecretRef) validate() error {
	if (r.Env == "") == (r.File == "") {
		return errors.New("exactly one of env or file")
	}
	if r.File != "" && !strings.HasPrefix(r.File, "/") {
		return fmt.Errorf("file %q must be an absolute path", r.File)
	}
	return nil
}

// errSecret is the error for a secret that cannot be read: it names the
// reference, never a value.
var errSecret = errors.New("secret unavailable")

// read is the secret's value. getenv is the gateway's environment as it
// was before scrubbing (serve reads it first).
func (r SecretRef) read(getenv func(string) string) (string, error) {
	if r.Env != "" {
		v := getenv(r.Env)
		if v == "" {
			return "", fmt.Errorf("%w: environment variable %s is empty or unset", errSecret, r.Env)
		}
		return v, nil
	}
	b, err := os.ReadFile(r.File)
	if err != nil {
		return "", fmt.Errorf("%w: file %s cannot be read", errSecret, r.File)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("%w: file %s is empty", errSecret, r.File)
	}
	return v, nil
}
