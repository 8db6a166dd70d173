package config

import (
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/upstream"
)

// Upstream is one MCP server the gateway fronts (upstreams[]): a stdio
// server it launches in the sandbox (command) or a Streamable HTTP one
// (url).
type Upstream struct {
	Name    string               `yaml:"name"`
	Command []string             `yaml:"command"`
	Env     map[string]string    `yaml:"env"`
	Secrets map[string]SecretRef `yaml:"secrets"`
	URL     string               `yaml:"url"`
	Headers map[string]Header    `yaml:"headers"`
	Timeout Duration             `yaml:"timeout"`
	// AllowNetworks are CIDRs an url upstream may resolve to although
	// private or loopback (e.g. 127.0.0.1/32 for a server on this host).
	AllowNetworks []string `yaml:"allow_networks"`
}

// SecretRef names where a secret is read: {env: NAME} or {file: /path}.
type SecretRef struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// Header is an url upstream's header: a plain string, or
// {secret: {env|file}, prefix: "Bearer "}.
type Header struct {
	Value  string     `yaml:"value"`
	Secret *SecretRef `yaml:"secret"`
	Prefix string     `yaml:"prefix"`
}

// UnmarshalYAML takes a header as a plain string or as an object.
func (h *Header) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		h.Value = n.Value
		return nil
	}
	type plain Header
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*h = Header(p)
	return nil
}

// Spec is u as package upstream takes it.
func (u Upstream) Spec() upstream.Spec {
	s := upstream.Spec{Name: u.Name, Command: u.Command, Env: u.Env, URL: u.URL, Timeout: u.Timeout.Std(),
		AllowNetworks: u.AllowNetworks, Secrets: map[string]upstream.SecretRef{}, Headers: map[string]upstream.Header{}}
	for k, r := range u.Secrets {
		s.Secrets[k] = upstream.SecretRef(r)
	}
	for k, h := range u.Headers {
		uh := upstream.Header{Value: h.Value, Prefix: h.Prefix}
		if h.Secret != nil {
			ref := upstream.SecretRef(*h.Secret)
			uh.Secret = &ref
		}
		s.Headers[k] = uh
	}
	return s
}

// SecretEnvNames are the environment variables the upstreams' secrets
// name: serve reads them before it scrubs its environment.
func (c Config) SecretEnvNames() []string {
	var out []string
	for _, u := range c.Upstreams {
		for _, r := range u.Secrets {
			if r.Env != "" {
				out = append(out, r.Env)
			}
		}
		for _, h := range u.Headers {
			if h.Secret != nil && h.Secret.Env != "" {
				out = append(out, h.Secret.Env)
			}
		}
	}
	return out
}

func (c *Config) validateUpstreams() []error {
	var errs []error
	seen := map[string]bool{}
	for i, u := range c.Upstreams {
		if err := u.Spec().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("config: upstreams[%d]: %w", i, err))
		}
		if seen[u.Name] {
			errs = append(errs, fmt.Errorf("config: upstreams[%d].name: %q is used twice", i, u.Name))
		}
		seen[u.Name] = true
	}
	return []error{errors.Join(errs...)}
}
