package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"time"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/gateway/identity"
	"github.com/portcullis/portcullis/wire"
)

// identityStack is what serve builds from auth.jwt, tls and the principals'
// client_cert_subject (docs/authentication.md).
type identityStack struct {
	jwt       *identity.JWTVerifier
	jwtIssuer string
	certs     *identity.CertMapper
	tls       *identity.TLSFiles
}

// openIdentity builds the JWT verifier (fetching the issuer's keys once),
// the client-certificate mapper and the TLS files. Bad files stop serve; an
// unreachable jwks_url does not (JWTs are answered 503 until it answers).
func openIdentity(ctx context.Context, cfg config.Config, log *slog.Logger) (*identityStack, error) {
	st := &identityStack{}
	if j := cfg.Auth.JWT; j.Enabled() {
		ids := make([]string, 0, len(cfg.Principals))
		for _, p := range cfg.Principals {
			ids = append(ids, p.ID)
		}
		v, err := identity.NewJWTVerifier(ctx, jwtConfig(j, ids, log))
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		st.jwt, st.jwtIssuer = v, j.Issuer
	}
	if cfg.TLS.Enabled() {
		minVer, _ := cfg.TLS.MinTLSVersion() // validated
		tf, err := identity.NewTLSFiles(identity.TLSOptions{
			CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile, ClientCAFile: cfg.TLS.ClientCAFile,
			RequireClientCert: cfg.TLS.RequireClientCert, MinVersion: minVer,
			ReloadInterval: cfg.TLS.ReloadInterval.Std(), Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		st.tls = tf
	}
	if cfg.TLS.ClientCAFile != "" {
		var bindings []identity.CertPrincipal
		for _, p := range cfg.Principals {
			if p.ClientCertSubject == "" {
				continue
			}
			attrs := make(map[string]any, len(p.Attributes)+1)
			maps.Copy(attrs, p.Attributes)
			attrs[identity.AttrAuth] = identity.AuthMTLS
			bindings = append(bindings, identity.CertPrincipal{Match: p.ClientCertSubject,
				Principal: wire.Principal{ID: p.ID, Roles: p.Roles, Attributes: attrs}})
		}
		m, err := identity.NewCertMapper(bindings)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		st.certs = m
	}
	return st, nil
}

func jwtConfig(j config.JWT, reserved []string, log *slog.Logger) identity.JWTConfig {
	leeway := j.Leeway.Std()
	if leeway == 0 {
		// The config's 0s is none, not the verifier's zero-value default.
		leeway = identity.NoLeeway
	}
	return identity.JWTConfig{
		Issuer: j.Issuer, Audience: j.Audience, JWKSURL: j.JWKSURL, JWKSFile: j.JWKSFile,
		Algorithms: j.Algorithms, PrincipalClaim: j.PrincipalClaim, RolesClaim: j.RolesClaim,
		PrincipalPrefix: j.PrincipalPrefix, ReservedIDs: reserved, Leeway: leeway,
		RefreshInterval: j.JWKSRefreshInterval.Std(), MinRefetchInterval: j.JWKSMinRefetchInterval.Std(),
		FetchTimeout: j.JWKSFetchTimeout.Std(), Logger: log,
	}
}

// wire sets the server options (nil pointers stay nil interfaces).
func (st *identityStack) wire(o *gateway.Options) {
	if st.jwt != nil {
		o.JWT = st.jwt
		o.ProtectedResource = &gateway.ProtectedResource{AuthorizationServers: []string{st.jwtIssuer}}
	}
	if st.certs != nil {
		o.ClientCerts = st.certs
		if st.tls != nil {
			o.ClientCATrusted = st.tls.TrustsClientCA
		}
	}
}

// run refreshes the issuer's keys and watches the TLS files (also on
// SIGHUP) until ctx ends.
func (st *identityStack) run(ctx context.Context, log *slog.Logger) {
	if st.jwt != nil {
		go st.jwt.Run(ctx)
	}
	if st.tls == nil {
		return
	}
	go st.tls.Run(ctx)
	go onSIGHUP(ctx, func() {
		if changed, err := st.tls.Reload(); err == nil && !changed {
			log.Info("tls: certificate files unchanged on SIGHUP")
		}
	})
}

// logFields are added to the "listening" line.
func (st *identityStack) logFields() []any {
	var out []any
	if st.tls != nil {
		leaf := st.tls.Leaf()
		out = append(out, "tls", true, "tls_subject", leaf.Subject.String(), "tls_not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "mtls", st.tls.MTLS())
	}
	if st.jwt != nil {
		ks := st.jwt.Status()
		out = append(out, "jwt_keys", ks.Keys, "jwt_keys_source", ks.Source)
	}
	return out
}

// doctorIdentity checks the TLS files and the JWKS the way serve loads them
// and says what is wrong.
func doctorIdentity(ctx context.Context, cfg config.Config, stdout io.Writer, report func(ok bool, what, detail string)) {
	if cfg.TLS.Enabled() {
		minVer, _ := cfg.TLS.MinTLSVersion()
		tf, err := identity.NewTLSFiles(identity.TLSOptions{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile,
			ClientCAFile: cfg.TLS.ClientCAFile, MinVersion: minVer})
		if err != nil {
			report(false, "tls", err.Error())
		} else {
			leaf := tf.Leaf()
			left := time.Until(leaf.NotAfter)
			report(true, "tls", fmt.Sprintf("%s, expires %s (in %s)", leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Hour)))
			if left < 14*24*time.Hour {
				fmt.Fprintf(stdout, "[warn] %-22s the certificate expires in less than 14 days; write the renewed one over %s (reloaded without restart)\n", "tls", cfg.TLS.CertFile)
			}
			if cfg.TLS.ClientCAFile != "" {
				fmt.Fprintf(stdout, "[info] %-22s client certificates verified against %s\n", "mtls", cfg.TLS.ClientCAFile)
			}
		}
	} else {
		fmt.Fprintf(stdout, "[info] %-22s off: plain HTTP on %s (keep it on loopback or behind a TLS proxy)\n", "tls", cfg.Listen)
	}
	if j := cfg.Auth.JWT; j.Enabled() {
		ctx, cancel := context.WithTimeout(ctx, j.JWKSFetchTimeout.Std()+time.Second)
		defer cancel()
		v, err := identity.NewJWTVerifier(ctx, jwtConfig(j, nil, nil))
		switch {
		case err != nil:
			report(false, "jwt keys", err.Error())
		case v.Status().Keys == 0:
			report(false, "jwt keys", fmt.Sprintf("%s: %s", v.Status().Source, v.Status().LastErr))
		default:
			report(true, "jwt keys", fmt.Sprintf("%d usable signature key(s) from %s; issuer %s, audience %s", v.Status().Keys, v.Status().Source, j.Issuer, j.Audience))
		}
	}
}
