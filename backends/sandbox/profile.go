package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portcullis/portcullis/wire"
)

// Profile is the OS sandbox one call is given, computed once from the
// enforced scope and rendered by each confining runner (bwrap argv, macOS
// SBPL). It is plain data with JSON tags so that evidence can record exactly
// what the program could see and reach.
type Profile struct {
	// ReadOnly and ReadWrite are the granted paths (real, absolute,
	// parents before children so nested grants override their parent).
	ReadOnly  []string `json:"read_only"`
	ReadWrite []string `json:"read_write"`
	// DenyFiles and DenyDirs are hidden even inside the grants: secrets
	// of the gateway user's home, .env files, and the policy's fs_deny.
	DenyFiles []string `json:"deny_files"`
	DenyDirs  []string `json:"deny_dirs"`
	// AutorunReadOnly are existing files and directories inside read-write
	// grants that run later for someone else (AutorunPath), bound read-only
	// over the grant unless the grant sets allow_autorun.
	AutorunReadOnly []string `json:"autorun_read_only"`
	// Network is the posture and the allowlist the egress proxy enforces.
	Network wire.Network `json:"network"`
	// EnvNames are the names (never values) of the program's environment.
	EnvNames []string `json:"env_names"`
	// Home is the private, empty home directory; Workdir the program's
	// working directory.
	Home    string      `json:"home"`
	Workdir string      `json:"workdir"`
	Limits  wire.Limits `json:"limits"`
}

// ProfileOptions tune how a Profile is computed.
type ProfileOptions struct {
	// UserHome is the gateway user's home, whose credential directories
	// are hidden when a grant covers them. Default: os.UserHomeDir.
	UserHome string
	// MaxScanEntries and MaxScanDirs bound the granted trees one call may
	// cover: every entry and directory below every searched grant counts.
	// Secret-shaped names are hidden at every depth, so a call whose trees
	// are larger is refused (ErrScanBudget) rather than run unsearched.
	// Defaults DefaultMaxScanEntries and DefaultMaxScanDirs.
	MaxScanEntries int
	MaxScanDirs    int
	// SkipScan lists trees not searched for secret-shaped names (system
	// directories such as /usr that hold no user secrets and would be
	// slow to walk).
	SkipScan []string
}

// HomeSecrets are the gateway user's credential stores, relative to its
// home, hidden whenever a grant covers them.
var HomeSecrets = []string{
	".ssh", ".aws", ".gnupg", ".config/gcloud", ".azure", ".kube", ".docker",
	".netrc", ".git-credentials", ".npmrc", ".pypirc", ".config/gh",
}

// ErrUnsafePath marks a grant or deny path the sandbox refuses to mount:
// a symlink where a real file or directory must be, "/" as a grant, or a
// kernel filesystem. Callers map it to sandbox_violation.
var ErrUnsafePath = errors.New("unsafe path for the sandbox")

// BuildProfile computes the Profile of spec with a fresh search of the
// granted trees, verifying nothing afterwards: for tests and for runners
// without a long-lived Cache. It refuses (ErrUnsafePath) rather than mount
// something it cannot vouch for: deny overlays and grants are lstat'ed,
// never followed, because bwrap would mount over a symlink's target
// (bubblewrap#390).
func BuildProfile(spec Spec, opts ProfileOptions) (Profile, error) {
	c := newUncachedCache(opts)
	p, w, err := c.Build(spec)
	w.Close()
	return p, err
}

// baseProfile is the part of the profile that needs no file system search:
// network, environment names, home, and the checked grants (parents first).
func baseProfile(spec Spec) (Profile, []wire.FSGrant, error) {
	p := Profile{
		ReadOnly: []string{}, ReadWrite: []string{}, DenyFiles: []string{}, DenyDirs: []string{}, AutorunReadOnly: []string{},
		Network:  spec.Scope.Network,
		EnvNames: []string{},
		Workdir:  spec.Dir,
		Limits:   spec.Limits,
	}
	if p.Network.Posture == "" {
		p.Network.Posture = wire.PostureOff
	}
	if p.Network.Allow == nil {
		p.Network.Allow = []string{}
	}
	switch p.Network.Posture {
	case wire.PostureOff, wire.PostureAllowlist, wire.PostureFull:
	default:
		return Profile{}, nil, fmt.Errorf("sandbox: unknown network posture %q", p.Network.Posture)
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		p.EnvNames = append(p.EnvNames, k)
		if k == "HOME" {
			p.Home = v
		}
	}
	slices.Sort(p.EnvNames)
	if p.Home != "" && (!filepath.IsAbs(p.Home) || filepath.Clean(p.Home) != p.Home || p.Home == "/") {
		return Profile{}, nil, fmt.Errorf("sandbox: HOME %q is not a clean absolute directory: %w", p.Home, ErrUnsafePath)
	}

	grants := slices.Clone(spec.Scope.FSGrants)
	// Parents first: a nested grant is mounted after, and so over, its parent.
	slices.SortStableFunc(grants, func(a, b wire.FSGrant) int { return len(a.Path) - len(b.Path) })
	for _, g := range grants {
		if err := checkGrant(g.Path); err != nil {
			return Profile{}, nil, err
		}
		switch g.Mode {
		case wire.ModeRead:
			p.ReadOnly = append(p.ReadOnly, g.Path)
		case wire.ModeReadWrite:
			p.ReadWrite = append(p.ReadWrite, g.Path)
		default:
			return Profile{}, nil, fmt.Errorf("sandbox: grant %s has mode %q, want r or rw", g.Path, g.Mode)
		}
	}
	return p, grants, nil
}

// explicitDenies are the gateway user's credential stores and the policy's
// fs_deny, hidden by path when a grant covers them.
func explicitDenies(d *denySet, spec Spec, opts ProfileOptions, all []string) error {
	home := opts.UserHome
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home != "" {
		if real, err := filepath.EvalSymlinks(home); err == nil {
			for _, rel := range HomeSecrets {
				if err := d.add(filepath.Join(real, rel), all); err != nil {
					return err
				}
			}
		}
	}
	for _, path := range spec.Scope.FSDeny {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return fmt.Errorf("sandbox: fs_deny path %q is not clean and absolute: %w", path, ErrUnsafePath)
		}
		if err := d.add(path, all); err != nil {
			return err
		}
	}
	return nil
}

// checkGrant refuses grants that cannot be bound safely.
func checkGrant(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("sandbox: grant %q is not clean and absolute: %w", path, ErrUnsafePath)
	}
	if path == "/" {
		return fmt.Errorf("sandbox: a grant of / cannot be sandboxed (it would expose every file); grant specific directories: %w", ErrUnsafePath)
	}
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if within(path, k) {
			return fmt.Errorf("sandbox: grant %s is inside %s, which the sandbox never exposes: %w", path, k, ErrUnsafePath)
		}
	}
	if err := CheckNotPrivate(path); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("sandbox: grant %s: %w", path, err)
	}
	if real != path {
		return fmt.Errorf("sandbox: grant %s resolves to %s (a symlink was swapped in): %w", path, real, ErrUnsafePath)
	}
	return nil
}

// CheckNotPrivate refuses (ErrUnsafePath) a grant that holds the gateway's
// temporary directory (os.TempDir(), also as its real path), where every
// call keeps its private directories: code.run's run directory with the
// program and the bridge FIFOs, Exec's HOME. Such a grant (/tmp as scratch
// space) would give a program the other calls' private directories, of
// other principals too: it could write tool calls into another run's
// bridge, to be made as that run's principal, and read its code. A grant
// below the temporary directory is fine.
func CheckNotPrivate(grant string) error {
	tmp := filepath.Clean(os.TempDir())
	for _, t := range []string{tmp, realOr(tmp)} {
		if within(t, grant) {
			return fmt.Errorf("sandbox: grant %s holds the gateway's temporary directory %s, where other calls keep their private run directories; grant a directory below it, or set the gateway's TMPDIR outside every grant: %w", grant, t, ErrUnsafePath)
		}
	}
	return nil
}

func realOr(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return path
}

// denySet collects deny overlays.
type denySet struct {
	files, dirs map[string]bool
}

// add hides path when it exists inside a grant. A symlink (at the path or
// in its parents) is refused: mounting over it would follow it.
func (d *denySet) add(path string, grants []string) error {
	if !slices.ContainsFunc(grants, func(g string) bool { return within(path, g) }) {
		return nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sandbox: deny path %s: %w", path, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sandbox: deny path %s: %w", path, err)
	}
	if parent != filepath.Dir(path) {
		return fmt.Errorf("sandbox: deny path %s has a symlink in its parents (%s): %w", path, parent, ErrUnsafePath)
	}
	return d.addInfo(path, fi)
}

func (d *denySet) addInfo(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("sandbox: %s must be hidden but is a symlink; replace it with a real file or remove it: %w", path, ErrUnsafePath)
	case fi.IsDir():
		d.dirs[path] = true
	default:
		d.files[path] = true
	}
	return nil
}

func (d *denySet) sorted() (files, dirs []string) {
	files, dirs = []string{}, []string{}
	for f := range d.files {
		files = append(files, f)
	}
	for f := range d.dirs {
		dirs = append(dirs, f)
	}
	slices.Sort(files)
	slices.Sort(dirs)
	return files, dirs
}

// within reports whether path lies in dir, by whole path segments.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// Within reports whether the clean absolute path lies in the clean absolute
// dir, comparing whole segments ("/usr" holds "/usr/bin", not "/usrx").
func Within(path, dir string) bool { return within(path, dir) }
