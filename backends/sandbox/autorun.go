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

// autorunState is where a tree walk stands for the autorun guard: the
// incremental form of AutorunPath. A walk that carries it classifies each
// entry in constant time instead of re-splitting the entry's whole path, so
// a scan of a large tree costs one map lookup or two per entry.
type autorunState struct {
	underDir bool   // the directory is, or lies below, a guarded directory
	base     string // the directory's own base name ("" at the walk's root)
}

// child reports whether the entry name inside the directory s describes is
// guarded (what AutorunPath says of the entry's path relative to the walk's
// root), and the state of that entry as a directory.
func (s autorunState) child(name string) (guarded bool, next autorunState) {
	under := s.underDir || autorunDir1[name] || autorunDir2[[2]string{s.base, name}]
	guarded = under || autorunNames[name] || autorunFile2[[2]string{s.base, name}]
	return guarded, autorunState{underDir: under, base: name}
}

// autorunStateOf is the state of the directory at rel (slash-separated,
// relative to the walk's root; "" for the root itself).
func autorunStateOf(rel string) autorunState {
	var s autorunState
	for _, seg := range strings.Split(strings.Trim(rel, "/"), "/") {
		if seg != "" {
			_, s = s.child(seg)
		}
	}
	return s
}

// The pattern tables as maps, for child. Every pattern has one or two
// segments; init refuses a longer one, which child could not match.
var (
	autorunDir1  = map[string]bool{}
	autorunDir2  = map[[2]string]bool{}
	autorunFile2 = map[[2]string]bool{}
)

func init() {
	for _, d := range autorunDirs {
		switch len(d) {
		case 1:
			autorunDir1[d[0]] = true
		case 2:
			autorunDir2[[2]string{d[0], d[1]}] = true
		default:
			panic("sandbox: autorun directory patterns have one or two segments")
		}
	}
	for _, f := range autorunFiles {
		if len(f) != 2 {
			panic("sandbox: autorun file patterns have two segments")
		}
		autorunFile2[[2]string{f[0], f[1]}] = true
	}
}
