package evidence_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/evidence"
)

// TestRedactSplitSecrets: a secret whose name and value sit in different
// places (a {"name", "value"} pair as Kubernetes env lists and HAR headers
// spell them, a [name, value] pair, a camelCase or passphrase field name)
// is redacted by both Redact and BoundedArgs, the path receipts take.
func TestRedactSplitSecrets(t *testing.T) {
	t.Parallel()
	const secret = "hunter2ZZ9plural"
	tests := []struct {
		name string
		args map[string]any
	}{
		{"k8s env entry", map[string]any{"containers": []any{map[string]any{
			"envFrom": []any{map[string]any{"name": "DB_PASSWORD", "value": secret}}}}}},
		{"har header", map[string]any{"request": map[string]any{
			"headers": []any{map[string]any{"name": "X-Api-Key", "value": secret}}}}},
		{"key/value object", map[string]any{"params": []any{map[string]any{"Key": "client_secret", "Value": secret}}}},
		{"header pair list", map[string]any{"headers": []any{[]any{"Accept", "json"}, []any{"Authorization", secret}}}},
		{"camelCase private key", map[string]any{"signer": map[string]any{"privateKey": secret}}},
		{"passphrase suffix", map[string]any{"gpg": map[string]any{"keyPassphrase": secret}}},
		{"short names", map[string]any{"db": map[string]any{"user": "app", "pass": secret}}},
		{"pwd", map[string]any{"login": []any{map[string]any{"pwd": secret}}}},
		{"privkey", map[string]any{"tls": map[string]any{"privkey": secret}}},
		{"passcode", map[string]any{"mfa": map[string]any{"passcode": secret}}},
		{"curl -u user:password", map[string]any{"argv": []any{"curl", "-u", "bob:" + secret, "https://x"}}},
		{"curl --user user:password", map[string]any{"argv": []any{"curl", "--proxy-user", "bob:" + secret}}},
		{"deep nesting", map[string]any{"a": []any{[]any{map[string]any{"b": map[string]any{"name": "GITHUB_TOKEN", "value": secret}}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			red, err := json.Marshal(evidence.Redact(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(red), secret) {
				t.Errorf("Redact kept the secret: %s", red)
			}
			raw, _ := json.Marshal(tc.args)
			if b := evidence.BoundedArgs(tc.args, raw, evidence.MaxArgsBytes); strings.Contains(string(b), secret) {
				t.Errorf("BoundedArgs kept the secret: %s", b)
			}
		})
	}
	// Not over-eager: a pair naming nothing secret keeps its value.
	keep := map[string]any{"headers": []any{map[string]any{"name": "Accept", "value": "json"}, []any{"Accept", "json"}}}
	if b, _ := json.Marshal(evidence.Redact(keep)); strings.Contains(string(b), evidence.Redacted) {
		t.Errorf("Redact(%v) = %s, want nothing redacted", keep, b)
	}
}
