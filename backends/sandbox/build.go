//go:build unix

package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/wire"
)

// Build computes the Profile of spec from the cache, scanning grants it has
// not seen (within the scan budget), and opens the Window through which the
// runner verifies, once the sandbox's mounts are in place, that nothing moved
// under them, and checks the autorun guard after the run. Close or Finish
// the window. The window is nil when the cache does not watch (nothing to
// verify); its methods accept nil.
func (c *Cache) Build(spec Spec) (Profile, *Window, error) {
	p, grants, err := baseProfile(spec)
	if err != nil {
		return Profile{}, nil, err
	}
	all := append(slices.Clone(p.ReadOnly), p.ReadWrite...)
	roots := scanRoots(grants, c.opts.SkipScan)
	grantPaths := map[string]bool{}
	for _, g := range grants {
		grantPaths[g.Path] = true
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.start()
	if c.werr != nil {
		return Profile{}, nil, c.werr
	}
	if err := c.drain(); err != nil {
		return Profile{}, nil, err
	}
	if !c.w.watching() {
		// Uncached: every Build is a fresh search.
		defer func() { c.clear(); clear(c.roots) }()
	}
	c.evict(roots)
	b := &budget{maxEntries: c.opts.MaxScanEntries, maxDirs: c.opts.MaxScanDirs}
	now := c.now()
	for _, r := range roots {
		c.roots[r] = now
		if err := c.ensure(r, b); err != nil {
			return Profile{}, nil, err
		}
	}
	c.reprobe(roots)

	d := denySet{files: map[string]bool{}, dirs: map[string]bool{}}
	// Secret-shaped names at every depth of every searched grant. A grant
	// itself is what the policy named: it is not hidden by its name.
	for path, s := range c.secrets {
		if grantPaths[path] || !inAny(path, roots) {
			continue
		}
		if s.mode&fs.ModeSymlink != 0 {
			return Profile{}, nil, fmt.Errorf("sandbox: %s must be hidden but is a symlink; replace it with a real file or remove it: %w", path, ErrUnsafePath)
		}
		if s.mode.IsDir() {
			d.dirs[path] = true
		} else {
			d.files[path] = true
		}
	}
	if err := explicitDenies(&d, spec, c.opts, all); err != nil {
		return Profile{}, nil, err
	}
	d.prune()
	p.DenyFiles, p.DenyDirs = d.sorted()

	gs := c.guardSnapshot(grants, roots)
	p.AutorunReadOnly = gs.readOnly(&d, roots)

	if !c.w.watching() {
		return p, nil, nil
	}
	w := &Window{c: c, roots: roots, grants: grants, grantPaths: grantPaths, gen0: c.gen,
		dests: map[string]bool{}, masks: map[string]bool{}, maskDirs: p.DenyDirs}
	for _, m := range p.DenyFiles {
		w.masks[m] = true
	}
	for _, m := range p.DenyDirs {
		w.masks[m] = true
	}
	for _, dest := range slices.Concat(p.DenyFiles, p.DenyDirs, p.AutorunReadOnly, all) {
		w.addDest(dest)
	}
	if gs.guarded {
		w.guard = gs
	}
	c.windows[w] = struct{}{}
	return p, w, nil
}

// ScanRoots are the grants a profile searches for secrets (grants in any
// order): those not in a skipped system tree, and not inside another.
func ScanRoots(grants []wire.FSGrant, skip []string) []string {
	g := slices.Clone(grants)
	slices.SortStableFunc(g, func(a, b wire.FSGrant) int { return len(a.Path) - len(b.Path) })
	return scanRoots(g, skip)
}

// scanRoots are the grants searched for secrets: those not in a skipped
// system tree, and not inside another grant searched already.
func scanRoots(grants []wire.FSGrant, skip []string) []string {
	var roots []string
	for _, g := range grants { // parents first
		if slices.ContainsFunc(skip, func(s string) bool { return within(g.Path, s) }) {
			continue
		}
		if inAny(g.Path, roots) {
			continue
		}
		roots = append(roots, g.Path)
	}
	return roots
}

func inAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if within(path, d) {
			return true
		}
	}
	return false
}

// prune drops overlays inside a hidden directory: its empty tmpfs already
// hides them, and bwrap could not create their mount points there.
func (d *denySet) prune() {
	for p := range d.files {
		if d.underDir(p) {
			delete(d.files, p)
		}
	}
	for p := range d.dirs {
		if d.underDir(p) {
			delete(d.dirs, p)
		}
	}
}

func (d *denySet) underDir(p string) bool {
	for dir := p; ; {
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		if d.dirs[parent] {
			return true
		}
		dir = parent
	}
}

// Window spans one call from the profile's computation to the end of its
// run. Verify, called once the sandbox's mounts are in place and before the
// program runs, fails when the granted trees changed in the meantime in a
// way that can leave a mask on the wrong file (a directory on a mask's path
// moved, a secret-shaped file appeared or moved). Finish, after the run,
// applies the autorun guard to what the run created.
type Window struct {
	c          *Cache
	roots      []string
	grants     []wire.FSGrant
	grantPaths map[string]bool
	dests      map[string]bool // mount destinations, their ancestors, the roots
	masks      map[string]bool
	maskDirs   []string
	gen0       uint64
	dirty      error
	guard      *guardSnap
}

func (w *Window) addDest(dest string) {
	for p := dest; ; p = filepath.Dir(p) {
		if w.dests[p] {
			return
		}
		w.dests[p] = true
		if slices.Contains(w.roots, p) || p == "/" || !inAny(p, w.roots) {
			return
		}
	}
}

func (w *Window) setDirty(err error) {
	if w.dirty == nil {
		w.dirty = err
	}
}

// Verify reports whether the sandbox built from this window's profile still
// hides what it must. It fails (ErrTreeChanged) when a change since Build
// could have moved a secret out from under its mask; the caller discards
// the sandbox before the program runs and builds again.
func (w *Window) Verify() error {
	if w == nil {
		return nil
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.drain(); err != nil {
		return err
	}
	if w.dirty == nil && c.gen != w.gen0 {
		for path, s := range c.secrets {
			if !s.secret || w.masks[path] || w.grantPaths[path] || !inAny(path, w.roots) || inAny(path, w.maskDirs) {
				continue
			}
			w.setDirty(fmt.Errorf("secret-shaped %s appeared", path))
			break
		}
		for _, r := range w.roots {
			if c.nodes[r] == nil {
				if fi, err := os.Lstat(r); err == nil && fi.IsDir() {
					w.setDirty(fmt.Errorf("the tree at %s was dropped", r))
				}
			}
		}
	}
	if w.dirty != nil {
		return fmt.Errorf("sandbox: %v while the sandbox was being built: %w: %w", w.dirty, ErrTreeChanged, ErrUnsafePath)
	}
	return nil
}

// Close ends the window without the post-run check (the program never ran).
func (w *Window) Close() {
	if w == nil {
		return
	}
	w.c.mu.Lock()
	delete(w.c.windows, w)
	w.c.mu.Unlock()
}

// AutorunChange is a file or directory that runs later for someone else
// (AutorunPath) which a run created or replaced inside a read-write grant
// without allow_autorun. The guard moves it aside (QuarantinedAs) so that
// it does not run; Error says why it could not.
type AutorunChange struct {
	Path          string `json:"path"`
	Reason        string `json:"reason"`
	QuarantinedAs string `json:"quarantined_as,omitempty"`
	Error         string `json:"error,omitempty"`
}

// QuarantineSuffix is added (with a random tag) to the name of a guarded
// file the run created: no shell, git, CI or editor runs it by that name.
const QuarantineSuffix = ".portcullis-quarantine-"

// Finish ends the window after the run: every guarded path under a
// read-write grant without allow_autorun that the run created, or replaced,
// is renamed aside and reported. Existing guarded files were bound
// read-only, so a run can only plant new ones (including by renaming a
// parent directory away and recreating it).
func (w *Window) Finish() []AutorunChange {
	if w == nil {
		return nil
	}
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.windows, w)
	if w.guard == nil {
		return nil
	}
	if err := c.drain(); err == nil && c.gen == w.gen0 {
		return nil
	}
	b := &budget{maxEntries: c.capEntries(), maxDirs: c.capDirs()}
	for _, r := range w.guard.roots {
		if err := c.ensure(r, b); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return []AutorunChange{{Path: r, Reason: "the autorun guard could not search the grant after the run", Error: err.Error()}}
		}
	}
	now := c.guardSnapshot(w.grants, w.roots)
	var changed []string
	for path, cur := range now.entries {
		if old, ok := w.guard.entries[path]; ok && old == cur {
			continue
		}
		if w.guard.protects(path, now) {
			continue
		}
		changed = append(changed, path)
	}
	slices.Sort(changed)
	var out []AutorunChange
	for i, path := range changed {
		if i > 0 && slices.ContainsFunc(changed[:i], func(a string) bool { return within(path, a) }) {
			continue // inside a changed directory moved aside whole
		}
		e := now.entries[path]
		ch := AutorunChange{Path: path, Reason: e.reason}
		as, err := quarantine(e.grant, path, e.self)
		if err != nil {
			ch.Error = err.Error()
		} else {
			ch.QuarantinedAs = as
		}
		out = append(out, ch)
	}
	return out
}

// guardSnap is the autorun guard's view of the guarded grants at one time.
type guardSnap struct {
	guarded bool // some grant is read-write without allow_autorun
	roots   []string
	entries map[string]guardEntry
	// bound are the directories bound read-only, with their identity then:
	// nothing below them can have been written while they stayed the same.
	bound map[string]ident
	// files are bound read-only (regular files and symlinks' targets).
	files []string
}

type guardEntry struct {
	self   ident // of the entry itself (lstat)
	target ident // of a symlink's resolved target (zero: none, or dangling)
	grant  string
	reason string
}

// guardSnapshot lists the guarded entries of the read-write grants without
// allow_autorun (grants parents first).
func (c *Cache) guardSnapshot(grants []wire.FSGrant, roots []string) *guardSnap {
	gs := &guardSnap{entries: map[string]guardEntry{}, bound: map[string]ident{}}
	for _, g := range grants {
		if g.Mode == wire.ModeReadWrite && !g.AllowAutorun {
			gs.guarded = true
			if r := rootOf(g.Path, roots); r != "" && !slices.Contains(gs.roots, r) {
				gs.roots = append(gs.roots, r)
			}
		}
	}
	if !gs.guarded {
		return gs
	}
	for path, s := range c.guards {
		g, ok := innermost(grants, path)
		if !ok || g.Mode != wire.ModeReadWrite || g.AllowAutorun || path == g.Path {
			continue
		}
		rel := relTo(path, g.Path)
		reason, guarded := AutorunPath(rel)
		if filepath.Base(path) == ".git" && !s.mode.IsDir() {
			reason, guarded = "a .git file or link (it chooses the repository whose hooks and config run)", true
		}
		if !guarded {
			continue
		}
		e := guardEntry{self: s.ident(), grant: g.Path, reason: reason}
		if s.mode&fs.ModeSymlink != 0 {
			if t, err := filepath.EvalSymlinks(path); err == nil {
				var sb unix.Stat_t
				if unix.Lstat(t, &sb) == nil {
					e.target = ident{uint64(sb.Dev), uint64(sb.Ino), modeOf(uint32(sb.Mode))}
				}
			}
		}
		gs.entries[path] = e
	}
	return gs
}

// readOnly chooses what to bind read-only: each guarded directory or regular
// file (the topmost of nested ones), and for a guarded symlink its target
// when that is a file or directory the sandbox could write (inside a
// searched read-write grant). Nothing hidden, nothing twice.
func (gs *guardSnap) readOnly(d *denySet, roots []string) []string {
	set := map[string]bool{}
	for path, e := range gs.entries {
		switch {
		case e.self.mode.IsDir():
			set[path] = true
			gs.bound[path] = e.self
		case e.self.mode.IsRegular():
			set[path] = true
		case e.self.mode&fs.ModeSymlink != 0 && e.target != (ident{}) && (e.target.mode.IsDir() || e.target.mode.IsRegular()):
			t, err := filepath.EvalSymlinks(path)
			if err != nil || !inAny(t, roots) {
				continue
			}
			set[t] = true
			if e.target.mode.IsDir() {
				gs.bound[t] = e.target
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		if d.files[p] || d.dirs[p] || d.underDir(p) || underAny(p, set) {
			continue
		}
		out = append(out, p)
	}
	// Parents first, as the grants.
	slices.SortFunc(out, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	gs.files = out
	return out
}

// underAny reports whether p lies strictly below a directory of set.
func underAny(p string, set map[string]bool) bool {
	for dir := filepath.Dir(p); dir != p; p, dir = dir, filepath.Dir(dir) {
		if set[dir] {
			return true
		}
	}
	return false
}

// protects reports whether path lies below a directory bound read-only at
// the start that is still the same directory: the run could not write there.
func (gs *guardSnap) protects(path string, now *guardSnap) bool {
	for dir := filepath.Dir(path); dir != path; path, dir = dir, filepath.Dir(dir) {
		if was, ok := gs.bound[dir]; ok {
			if cur, ok := now.entries[dir]; ok && cur.self == was {
				return true
			}
			var sb unix.Stat_t
			if unix.Lstat(dir, &sb) == nil && (ident{uint64(sb.Dev), uint64(sb.Ino), modeOf(uint32(sb.Mode))}) == was {
				return true
			}
		}
	}
	return false
}

func rootOf(path string, roots []string) string {
	for _, r := range roots {
		if within(path, r) {
			return r
		}
	}
	return ""
}

// innermost is the grant that decides path's access: the longest
// containing it (grants parents first).
func innermost(grants []wire.FSGrant, path string) (wire.FSGrant, bool) {
	for i := len(grants) - 1; i >= 0; i-- {
		if within(path, grants[i].Path) {
			return grants[i], true
		}
	}
	return wire.FSGrant{}, false
}

// quarantine renames path (inside grant) aside when it is still the entry
// the guard saw, walking from the grant without following any symlink.
func quarantine(grant, path string, want ident) (string, error) {
	rel := relTo(path, grant)
	if rel == "" || rel == path {
		return "", errors.New("not inside its grant")
	}
	dir, base := filepath.Split(rel)
	fd, err := unix.Open(grant, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
	if err != nil {
		return "", err
	}
	defer func() { unix.Close(fd) }()
	for _, seg := range strings.Split(strings.Trim(dir, "/"), "/") {
		if seg == "" {
			continue
		}
		nfd, err := unix.Openat(fd, seg, unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|oPath, 0)
		if err != nil {
			return "", err
		}
		unix.Close(fd)
		fd = nfd
	}
	var sb unix.Stat_t
	if err := unix.Fstatat(fd, base, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", err
	}
	if (ident{uint64(sb.Dev), uint64(sb.Ino), modeOf(uint32(sb.Mode))}) != want {
		return "", errors.New("it changed again before it could be moved aside")
	}
	tag := make([]byte, 4)
	_, _ = rand.Read(tag)
	name := base + QuarantineSuffix + hex.EncodeToString(tag)
	if err := renameNoReplace(fd, base, name); err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(path), name), nil
}

// Active reports whether Verify has anything to check: the call has
// searched trees and the cache watches them.
func (w *Window) Active() bool { return w != nil && len(w.roots) > 0 }

// MayMask predicts whether the profile of spec will mask or bind read-only
// anything inside the trees it searches, as far as the cache knows now: a
// secret-shaped or guarded entry in them, a policy fs_deny, one of the
// gateway user's credential stores in them, or a tree not searched yet (or no watch) all
// say yes. Changes not drained yet are not counted: the answer is for
// scheduling (the bwrap runner's freezer), never for what a sandbox hides.
func (c *Cache) MayMask(spec Spec) bool {
	if len(spec.Scope.FSDeny) > 0 {
		return true
	}
	roots := ScanRoots(spec.Scope.FSGrants, c.opts.SkipScan)
	home := c.opts.UserHome
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home != "" {
		for _, rel := range HomeSecrets {
			if inAny(filepath.Join(home, rel), roots) {
				return true
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil || !c.w.watching() {
		return true
	}
	for _, r := range roots {
		if c.nodes[r] == nil {
			return true
		}
	}
	for p := range c.secrets {
		if inAny(p, roots) {
			return true
		}
	}
	for p := range c.guards {
		if inAny(p, roots) {
			return true
		}
	}
	return false
}
