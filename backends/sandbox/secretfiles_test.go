package sandbox

import "testing"

func TestSecretFileName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{".env", true}, {".env.local", true}, {".envrc", true}, {".ENV", true},
		{".netrc", true}, {".git-credentials", true}, {".npmrc", true}, {".pgpass", true},
		{".ssh", true}, {".gnupg", true}, {".aws", true}, {".kube", true},
		{"id_rsa", true}, {"id_ed25519", true}, {"server.key", true}, {"cert.P12", true},
		{"id_rsa.pub", false}, {"env", false}, {"main.go", false}, {".key", false},
		{"keys", false}, {"README.md", false}, {"environment.ts", false}, {".gitignore", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := SecretFileName(tt.name); got != tt.want {
				t.Errorf("SecretFileName(%q) = %v, want %v", tt.name, got, tt.want)
			}
		})
	}
}
