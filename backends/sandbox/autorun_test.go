package sandbox

import "testing"

func TestAutorunPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rel  string
		want bool
	}{
		{".bashrc", true}, {"home/alice/.zshrc", true}, {".profile", true},
		{".git/hooks/pre-commit", true}, {"vendor/x/.git/hooks/post-checkout", true},
		{".git/hooks", true}, {".git/config", true}, {"sub/.git/config", true},
		{".vscode/tasks.json", true}, {".vscode/settings.json", true},
		{".github/workflows/ci.yml", true}, {".gitlab-ci.yml", true}, {".husky/pre-push", true},
		{".envrc", true},
		{"src/main.go", false}, {".git/HEAD", false}, {".git/objects/ab/cdef", false},
		{"config", false}, {".vscode/extensions.json", false}, {".github/CODEOWNERS", false},
		{"docs/.git-notes", false}, {".", false}, {"", false}, {"bashrc", false},
		{".git/config/x", false},
	}
	for _, tt := range tests {
		t.Run(tt.rel, func(t *testing.T) {
			t.Parallel()
			reason, got := AutorunPath(tt.rel)
			if got != tt.want {
				t.Errorf("AutorunPath(%q) = %v (%q), want %v", tt.rel, got, reason, tt.want)
			}
			if got && reason == "" {
				t.Errorf("AutorunPath(%q): guarded without a reason", tt.rel)
			}
		})
	}
}
