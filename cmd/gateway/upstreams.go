package main

import (
	"log/slog"
	"os"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/upstream"
)

// newUpstreams is the manager of the configured upstream MCP servers, or
// nil when there are none. The environment variables their secrets name
// are read here, before serve scrubs its environment, and kept in memory
// only: a restarted stdio server gets them again without the gateway's
// environment holding them.
func newUpstreams(cfg config.Config, st *stack, log *slog.Logger) (*upstream.Manager, error) {
	if len(cfg.Upstreams) == 0 {
		return nil, nil
	}
	env := map[string]string{}
	for _, n := range cfg.SecretEnvNames() {
		env[n] = os.Getenv(n)
		_ = os.Unsetenv(n) // never inherited by anything the gateway starts
	}
	specs := make([]upstream.Spec, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		specs = append(specs, u.Spec())
	}
	if st.sandbox == nil {
		log.Warn("stdio upstreams need the bwrap sandbox; they stay down on this backend", "backend", st.backend)
	}
	return upstream.New(specs, upstream.Options{Logger: log.With("component", "upstream"), Sandbox: st.sandbox,
		Getenv: func(n string) string { return env[n] }})
}
