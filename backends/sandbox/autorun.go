package sandbox

import "strings"

// autorunNames are base names of files that run commands, or configure
// what runs, for a person or a tool other than the agent: shell startup
// files, and hook managers' configs.
var autorunNames = map[string]bool{
	".bashrc": true, ".bash_profile": true, ".bash_login": true, ".bash_logout": true,
	".profile": true, ".zshrc": true, ".zshenv": true, ".zprofile": true, ".zlogin": true,
	".zlogout": true, ".cshrc": true, ".tcshrc": true, ".login": true, ".logout": true,
	".kshrc": true, ".mkshrc": true, ".xinitrc": true, ".xprofile": true, ".xsession": true,
	".xsessionrc": true, ".inputrc": true, ".envrc": true,
	".gitlab-ci.yml": true, ".travis.yml": true, "azure-pipelines.yml": true,
	"Jenkinsfile": true, "bitbucket-pipelines.yml": true, ".pre-commit-config.yaml": true,
}

// autorunDirs are directories every file below which is guarded: git hooks,
// hook managers, CI definitions.
var autorunDirs = [][]string{
	{".git", "hooks"},
	{".husky"},
	{".github", "workflows"},
	{".circleci"},
	{".buildkite"},
	{".config", "autostart"},
	{".config", "fish"},
}

// autorunFiles are two-segment paths guarded wherever they occur.
var autorunFiles = [][]string{
	{".git", "config"},
	{".vscode", "tasks.json"},
	{".vscode", "settings.json"},
	{".vscode", "launch.json"},
	{".idea", "workspace.xml"},
}

// AutorunPath reports whether writing the file at rel (a slash-separated
// path below a grant, "." or "" for the grant itself) would plant something
// that runs later for someone else: a shell rc or profile file, a git hook
// or .git/config (core.fsmonitor, core.hooksPath, aliases run code), an
// editor task or settings file that runs commands, or a CI workflow. It is
// checked at every depth: a repository or a home directory can sit anywhere
// inside a grant. The returned reason names what the file is, for the
// fs_denied message.
//
// This is the "autorun guard". The file tools refuse such writes and the OS
// sandbox binds such files read-only inside read-write grants, unless the
// grant sets allow_autorun.
func AutorunPath(rel string) (reason string, guarded bool) {
	rel = strings.Trim(rel, "/")
	if rel == "" || rel == "." {
		return "", false
	}
	segs := strings.Split(rel, "/")
	base := segs[len(segs)-1]
	if autorunNames[base] {
		return "a shell, session or hook start-up file (" + base + ")", true
	}
	for i := range segs {
		for _, d := range autorunDirs {
			if hasSegs(segs[i:], d) {
				return "a file under " + strings.Join(d, "/") + " (hooks and CI definitions run code)", true
			}
		}
		for _, f := range autorunFiles {
			if len(segs)-i == len(f) && hasSegs(segs[i:], f) {
				return strings.Join(f, "/") + " (it configures commands that run later)", true
			}
		}
	}
	return "", false
}

// hasSegs reports whether segs starts with prefix.
func hasSegs(segs, prefix []string) bool {
	if len(segs) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		if segs[i] != p {
			return false
		}
	}
	return true
}
