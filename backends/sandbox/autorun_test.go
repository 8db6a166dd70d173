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

// TestAutorunStateMatchesAutorunPath: the incremental form a tree walk uses
// says exactly what AutorunPath says, for every prefix of many paths built
// from the segments the patterns are made of.
func TestAutorunStateMatchesAutorunPath(t *testing.T) {
	t.Parallel()
	segs := []string{".git", "hooks", "config", ".github", "workflows", ".config", "fish", "autostart",
		".vscode", "tasks.json", "settings.json", ".husky", ".bashrc", "src", "x", ".circleci", ".idea", "workspace.xml", "Jenkinsfile"}
	rng := uint64(1)
	next := func(n int) int {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int((rng >> 33) % uint64(n))
	}
	for range 20000 {
		var s autorunState
		path := ""
		for d := 0; d < 1+next(6); d++ {
			seg := segs[next(len(segs))]
			if path == "" {
				path = seg
			} else {
				path += "/" + seg
			}
			var got bool
			got, s = s.child(seg)
			if _, want := AutorunPath(path); got != want {
				t.Fatalf("child along %q = %v, AutorunPath = %v", path, got, want)
			}
			if st := autorunStateOf(path); st != s {
				t.Fatalf("autorunStateOf(%q) = %+v, walk gave %+v", path, st, s)
			}
		}
	}
}
