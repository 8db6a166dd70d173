package main

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/bundles"
	"github.com/portcullis/portcullis/wire"
)

// TestShadowDiffKeepsNoSecrets: a shadow_diff evidence event holds both
// decisions, and a decision can carry secrets a receipt never keeps: the
// values of env.set (receipts record env names only) and reasons that
// quote the call's input (receipts keep them through the redactor). The
// event keeps the names and the redacted reasons, not the values.
func TestShadowDiffKeepsNoSecrets(t *testing.T) {
	t.Parallel()
	const envSecret = "policy-injected-Zq81secret"
	const argSecret = "sk-ant-api03-AAAAbbbbCCCCdddd"
	dec := func(allow bool) wire.Decision {
		return wire.Decision{Allow: allow,
			Reasons: []string{"argv [curl -H x-api-key=" + argSecret + "] is not allowed"},
			Env:     wire.EnvPolicy{Pass: []string{"GOFLAGS"}, Set: map[string]string{"DEPLOY_TOKEN": envSecret}}}
	}
	body, err := shadowDiffBody(bundles.ShadowDiff{LiveRevision: "a", ShadowRevision: "b", PrincipalID: "agent", Tool: "Exec",
		Fields: []string{"allow"}, Live: dec(true), Shadow: dec(false)})
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{envSecret, argSecret} {
		if strings.Contains(string(body), secret) {
			t.Errorf("shadow_diff body keeps %q: %s", secret, body)
		}
	}
	if !strings.Contains(string(body), "DEPLOY_TOKEN") || !strings.Contains(string(body), "is not allowed") {
		t.Errorf("shadow_diff body lost the env name or the reason: %s", body)
	}
}
