package wire

import "strings"

// SecretName reports whether an environment variable or field name is
// secret-shaped: such names are never passed through from the gateway's own
// environment and their values never enter evidence or logs.
func SecretName(name string) bool {
	n := strings.ToUpper(strings.TrimSpace(name))
	n = strings.ReplaceAll(n, "-", "_")
	if n == "" {
		return false
	}
	for _, exact := range []string{"DATABASE_URL", "GITHUB_TOKEN", "AUTHORIZATION", "COOKIE", "SET_COOKIE", "PGPASSWORD", "NPM_TOKEN"} {
		if n == exact {
			return true
		}
	}
	for _, prefix := range []string{"AWS_", "SSH_", "GH_", "GITHUB_", "AZURE_", "GOOGLE_APPLICATION", "GCP_", "PORTCULLIS_", "OPENAI_", "ANTHROPIC_", "VAULT_", "DOCKER_AUTH", "KUBECONFIG"} {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	for _, suffix := range []string{"_KEY", "_TOKEN", "_SECRET", "_CREDENTIALS", "_CREDENTIAL", "_PASS", "_PWD", "_DSN", "_URL_WITH_CREDENTIALS"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	for _, part := range []string{"PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "API_KEY", "PRIVATE_KEY", "ACCESS_KEY", "SESSION_KEY", "CREDENTIAL"} {
		if strings.Contains(n, part) {
			return true
		}
	}
	return n == "KEY" || n == "TOKEN" || n == "SECRET" || n == "PASSWORD"
}
