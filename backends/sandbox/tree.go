//go:build unix

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The scan cache: what every granted tree holds that the sandbox must hide
// (secret-shaped names, at every depth) or guard (files that run later for
// someone else), kept current between calls by watching every directory
// (inotify on Linux) instead of walking the trees again for every call.
//
// Each directory of a scanned tree is a node, watched through the
// descriptor it was listed from (so the watch and the listing are the same
// directory, whatever its path became). A call drains the pending events
// first; events of operations that completed before are already queued, so
// a previous Exec's mv is seen. Only the directories an event names are
// listed again. A lost event (queue overflow) drops every tree; a tree that
// cannot be watched or listed as it must be is dropped and its next call
// refused. Nothing is ever followed through a symlink.

// node is one directory of a scanned tree.
type node struct {
	path     string
	wd       int // watch descriptor; -1 when not watched
	dev, ino uint64
	parent   *node
	dirs     map[string]*node    // subdirectories that are scanned
	specials map[string]*special // secret-shaped or autorun-candidate entries
	state    autorunState        // this directory's autorun state relative to /
	entries  int                 // entries listed directly in this directory
	// subEntries and subDirs count the subtree, this directory included
	// (subDirs counts it once).
	subEntries, subDirs int
	// unlisted: neither the gateway nor the sandbox can list or enter it.
	unlisted bool
}

// special is an entry the profile acts on.
type special struct {
	path   string
	secret bool // SecretFileName: masked
	guard  bool // AutorunPath relative to /, or a .git that is not a directory
	mode   fs.FileMode
	dev    uint64
	ino    uint64
}

// ident is what identifies a file between two looks: a replaced file has
// another inode.
type ident struct {
	dev, ino uint64
	mode     fs.FileMode
}

func (s *special) ident() ident { return ident{s.dev, s.ino, s.mode.Type()} }

// event is one change a watcher reports, in its order.
type event struct {
	wd   int
	name string // "" for events on the watched directory itself
	kind evKind
	dir  bool // the entry named is a directory
}

type evKind uint8

const (
	evCreate evKind = iota
	evDelete
	evMovedFrom
	evMovedTo
	evSelfGone // the watched directory itself was moved or deleted
	evIgnored  // the watch is gone (directory deleted, file system unmounted)
	evOverflow // events were lost
)

// watcher is the OS's change notification for directories.
type watcher interface {
	// watching reports whether changes are reported at all; without it
	// the cache scans afresh for every call and cannot verify a window.
	watching() bool
	// add watches the directory open at fd and returns its watch
	// descriptor, the same one again for a directory already watched.
	add(fd int) (int, error)
	remove(wd int)
	// read returns the pending events without blocking (none: nil).
	read() ([]event, error)
	// reset forgets every watch and every pending event.
	reset() error
	close()
}

// ErrScanBudget marks a call refused because its granted trees are larger
// than the scan budget: secret-shaped files could not be looked for at every
// depth, and the sandbox does not run with secrets possibly exposed. It is
// always wrapped with ErrUnsafePath.
var ErrScanBudget = errors.New("granted trees too large to search for secrets")

// ErrTreeChanged marks a call whose granted tree changed, while its sandbox
// was being built, in a way that could move a secret out of sight of its
// masks. The runner retries; it is returned (with ErrUnsafePath) when the
// tree keeps changing.
var ErrTreeChanged = errors.New("granted tree changed while the sandbox was being built")

// Defaults of the scan budget and the cache.
const (
	DefaultMaxScanEntries = 200000
	DefaultMaxScanDirs    = 20000
	// rootIdleTTL is how long a tree no call used stays watched.
	rootIdleTTL = 10 * time.Minute
)

// Cache builds sandbox profiles from scanned, watched grant trees. It is safe
// for concurrent use; one per runner.
type Cache struct {
	opts ProfileOptions
	now  func() time.Time
	euid int

	mu       sync.Mutex
	w        watcher
	werr     error // the watcher could not be created: every Build fails
	nodes    map[string]*node
	byWD     map[int]*node
	secrets  map[string]*special
	guards   map[string]*special
	unlisted map[string]*node
	roots    map[string]time.Time // scanned grant roots, last used
	windows  map[*Window]struct{}
	gen      uint64 // counts applied changes
	// lastEvict is when evict last looked at the whole cache.
	lastEvict time.Time
	dirbuf    []byte // getdents buffer, used under mu
}

// NewCache returns a cache that watches the trees it scans. When the OS
// cannot watch (inotify unavailable or out of instances), every Build fails
// rather than build profiles from a stale scan.
//
// The watcher (one inotify instance, of which a user has 128 by default) is
// created at the first Build and released when the cache is closed or
// garbage collected.
func NewCache(opts ProfileOptions) *Cache {
	return newCache(opts)
}

// start creates the watcher on first use.
func (c *Cache) start() {
	if c.w != nil || c.werr != nil {
		return
	}
	w, err := newWatcher()
	if err != nil {
		c.werr = fmt.Errorf("sandbox: cannot watch granted trees for secrets (%w); raise fs.inotify.max_user_instances", err)
		return
	}
	c.w = w
	runtime.AddCleanup(c, func(w watcher) { w.close() }, w)
}

// newUncachedCache scans afresh for every Build and verifies no window:
// the semantics of BuildProfile.
func newUncachedCache(opts ProfileOptions) *Cache {
	c := newCache(opts)
	c.w = noWatcher{}
	return c
}

func newCache(opts ProfileOptions) *Cache {
	if opts.MaxScanEntries <= 0 {
		opts.MaxScanEntries = DefaultMaxScanEntries
	}
	if opts.MaxScanDirs <= 0 {
		opts.MaxScanDirs = DefaultMaxScanDirs
	}
	c := &Cache{opts: opts, now: time.Now, euid: os.Geteuid(), roots: map[string]time.Time{}, windows: map[*Window]struct{}{},
		dirbuf: make([]byte, 32<<10)}
	c.clear()
	return c
}

func (c *Cache) clear() {
	c.nodes = map[string]*node{}
	c.byWD = map[int]*node{}
	c.secrets = map[string]*special{}
	c.guards = map[string]*special{}
	c.unlisted = map[string]*node{}
}

// Close releases the watcher. Builds after Close fail.
func (c *Cache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w != nil {
		c.w.close()
	}
	c.w = noWatcher{}
	c.werr = errors.New("sandbox: the scan cache is closed")
	c.clear()
}

// capDirs and capEntries bound everything the cache watches, over all
// trees: least recently used trees are forgotten past it.
func (c *Cache) capDirs() int    { return 4 * c.opts.MaxScanDirs }
func (c *Cache) capEntries() int { return 4 * c.opts.MaxScanEntries }

// budget counts what one scan may still visit.
type budget struct {
	entries, dirs       int // visited
	maxEntries, maxDirs int
	root                string
}

func (b *budget) over() bool { return b.entries > b.maxEntries || b.dirs > b.maxDirs }

func (b *budget) err() error {
	return fmt.Errorf("sandbox: the granted trees hold more than %d entries or %d directories (at grant %s); "+
		"secret-shaped files must be hidden at every depth, so the call is refused rather than run unsearched: "+
		"narrow the grant, or raise sandbox.mask_max_entries / sandbox.mask_max_dirs: %w: %w",
		b.maxEntries, b.maxDirs, b.root, ErrScanBudget, ErrUnsafePath)
}

// scanAt lists and watches the directory name in the directory open at
// parentFD, and everything below it that is not secret-shaped, and attaches
// it to parent. A directory that is gone, or is no longer a directory, is
// not an error (its event follows). It returns nil, nil for those.
func (c *Cache) scanAt(parentFD int, name, path string, parent *node, st autorunState, b *budget) (*node, error) {
	fd, err := unix.Openat(parentFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return nil, nil
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return c.unlistable(parentFD, name, path, parent, st, b)
	case err != nil:
		return nil, fmt.Errorf("sandbox: opening %s to search it for secrets: %w", path, err)
	}
	defer unix.Close(fd)
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", path, err)
	}
	wd, err := c.w.add(fd)
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return nil, fmt.Errorf("sandbox: cannot watch %s for secrets: the inotify watch limit is reached "+
				"(raise fs.inotify.max_user_watches, or narrow the grants): %w", path, ErrUnsafePath)
		}
		return nil, fmt.Errorf("sandbox: cannot watch %s for secrets: %w", path, err)
	}
	if old := c.byWD[wd]; wd >= 0 && old != nil {
		if old.path == path && old.ino == uint64(sb.Ino) && old.dev == uint64(sb.Dev) {
			// Already scanned and kept current (a tree scanned for another
			// grant): adopt it.
			if old.parent == nil && parent != nil {
				old.parent = parent
			}
			b.entries += old.subEntries
			b.dirs += old.subDirs
			return old, nil
		}
		// The same directory known under a path it has left (its move's
		// events are still queued): forget that subtree, keep this watch.
		c.drop(old, wd)
	}
	if x := c.nodes[path]; x != nil {
		// Another directory had this path (its move's events are still
		// queued): forget it, so nothing is counted twice.
		c.drop(x, wd)
	}
	b.dirs++
	n := &node{path: path, wd: wd, dev: uint64(sb.Dev), ino: uint64(sb.Ino), parent: parent, state: st,
		dirs: map[string]*node{}, specials: map[string]*special{}}
	c.nodes[path] = n
	if wd >= 0 {
		c.byWD[wd] = n
	}
	if b.over() {
		return n, b.err()
	}
	ents, err := readDir(fd, c.dirbuf)
	if err != nil {
		return n, fmt.Errorf("sandbox: listing %s to search it for secrets: %w", path, err)
	}
	n.entries = len(ents)
	n.subEntries, n.subDirs = n.entries, 1
	b.entries += len(ents)
	if b.over() {
		return n, b.err()
	}
	for _, e := range ents {
		sub, err := c.entry(fd, n, e.name, e.typ, b)
		if sub != nil {
			n.dirs[e.name] = sub
			n.subEntries += sub.subEntries
			n.subDirs += sub.subDirs
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// entry classifies one entry of n (open at fd) and scans it when it is a
// directory to descend into.
func (c *Cache) entry(fd int, n *node, name string, typ fs.FileMode, b *budget) (*node, error) {
	path := n.path + "/" + name
	if n.path == "/" {
		path = "/" + name
	}
	secret := SecretFileName(name)
	guarded, st := n.state.child(name)
	if typ == fs.ModeIrregular {
		// The file system did not say: look.
		var sb unix.Stat_t
		if err := unix.Fstatat(fd, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, nil
		}
		typ = modeOf(uint32(sb.Mode))
	}
	if name == ".git" && typ&fs.ModeDir == 0 {
		// A .git file (gitdir: pointer) or symlink chooses the repository
		// whose config and hooks run: guarded like them.
		guarded = true
	}
	if secret || guarded {
		var sb unix.Stat_t
		if err := unix.Fstatat(fd, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			s := &special{path: path, secret: secret, guard: guarded, mode: modeOf(uint32(sb.Mode)), dev: uint64(sb.Dev), ino: uint64(sb.Ino)}
			n.specials[name] = s
			if secret {
				c.secrets[path] = s
			}
			if guarded {
				c.guards[path] = s
			}
			typ = s.mode.Type()
		}
	}
	if typ&fs.ModeDir == 0 || secret {
		// A secret-shaped directory is masked whole: nothing below it is
		// visible, so nothing below it needs looking at.
		return nil, nil
	}
	return c.scanAt(fd, name, path, n, st, b)
}

// unlistable handles a directory the gateway may not open. The sandbox has
// at most the gateway's rights, so it cannot list it either; but it could
// open names inside (".env" is easy to guess) if it may search the
// directory, or make it readable if it owns it. Either refuses the call.
func (c *Cache) unlistable(parentFD int, name, path string, parent *node, st autorunState, b *budget) (*node, error) {
	var sb unix.Stat_t
	if err := unix.Fstatat(parentFD, name, &sb, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, nil
	}
	if c.euid == 0 || int(sb.Uid) == c.euid {
		return nil, fmt.Errorf("sandbox: %s cannot be listed to search it for secrets, and the sandbox could make it readable: %w", path, ErrUnsafePath)
	}
	if unix.Faccessat(parentFD, name, unix.X_OK, 0) == nil {
		return nil, fmt.Errorf("sandbox: %s cannot be listed to search it for secrets, but names inside it can be opened: %w", path, ErrUnsafePath)
	}
	b.dirs++
	n := &node{path: path, wd: -1, dev: uint64(sb.Dev), ino: uint64(sb.Ino), parent: parent, state: st,
		dirs: map[string]*node{}, specials: map[string]*special{}, unlisted: true, subDirs: 1}
	c.nodes[path] = n
	c.unlisted[path] = n
	return n, nil
}

func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFREG:
		return 0
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	default:
		return fs.ModeDevice
	}
}

// drop forgets n and its subtree, removing their watches but keep's.
func (c *Cache) drop(n *node, keep int) {
	if p := n.parent; p != nil {
		if p.dirs[filepath.Base(n.path)] == n {
			delete(p.dirs, filepath.Base(n.path))
			p.add(-n.subEntries, -n.subDirs)
		}
		n.parent = nil
	}
	c.forget(n, keep)
}

func (c *Cache) forget(n *node, keep int) {
	for _, d := range n.dirs {
		c.forget(d, keep)
	}
	c.forgetSpecials(n)
	if c.nodes[n.path] == n {
		delete(c.nodes, n.path)
	}
	delete(c.unlisted, n.path)
	if n.wd >= 0 {
		if c.byWD[n.wd] == n {
			delete(c.byWD, n.wd)
		}
		if n.wd != keep {
			c.w.remove(n.wd)
		}
	}
	n.dirs = nil
}

func (c *Cache) forgetSpecials(n *node) {
	for _, s := range n.specials {
		if c.secrets[s.path] == s {
			delete(c.secrets, s.path)
		}
		if c.guards[s.path] == s {
			delete(c.guards, s.path)
		}
	}
	n.specials = map[string]*special{}
}

// add changes the counts of n and its ancestors.
func (n *node) add(entries, dirs int) {
	for ; n != nil; n = n.parent {
		n.subEntries += entries
		n.subDirs += dirs
	}
}

// top is the outermost scanned ancestor of n.
func (n *node) top() *node {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// drain applies every pending event. It fails only when the watcher does;
// the cache is then empty and the next scans start afresh.
func (c *Cache) drain() error {
	if !c.w.watching() {
		return nil
	}
	for range 1000 {
		evs, err := c.w.read()
		if err != nil {
			c.reset()
			return fmt.Errorf("sandbox: reading directory changes: %w", err)
		}
		if len(evs) == 0 {
			return nil
		}
		dirty := map[*node]bool{}
		for _, ev := range evs {
			c.apply(ev, dirty)
		}
		c.refreshAll(dirty)
	}
	// Changes faster than they can be followed: start afresh.
	c.reset()
	return nil
}

// reset forgets every tree (after lost events): every open window is dirty,
// the next Build rescans.
func (c *Cache) reset() {
	c.gen++
	for w := range c.windows {
		w.setDirty(errors.New("directory change events were lost"))
	}
	if err := c.w.reset(); err != nil {
		c.werr = fmt.Errorf("sandbox: cannot watch granted trees for secrets: %w", err)
	}
	c.clear()
}

func (c *Cache) apply(ev event, dirty map[*node]bool) {
	if ev.kind == evOverflow {
		c.reset()
		clear(dirty)
		return
	}
	n := c.byWD[ev.wd]
	if n == nil {
		return // a watch already removed
	}
	c.gen++
	switch ev.kind {
	case evIgnored:
		c.touchTree(n.path)
		c.drop(n, n.wd)
		return
	case evSelfGone:
		if n.parent == nil {
			// A scanned root itself moved or was deleted; its parent is
			// not watched, so this is the only news of it.
			c.touchTree(n.path)
			c.drop(n, -1)
		}
		return
	}
	path := n.path + "/" + ev.name
	if ev.kind == evDelete || ev.kind == evMovedFrom {
		c.touchPath(path)
	}
	if d := n.dirs[ev.name]; d != nil {
		c.drop(d, -1)
	}
	if s := n.specials[ev.name]; s != nil && (ev.kind == evDelete || ev.kind == evMovedFrom) {
		delete(n.specials, ev.name)
		if c.secrets[s.path] == s {
			delete(c.secrets, s.path)
		}
		if c.guards[s.path] == s {
			delete(c.guards, s.path)
		}
	}
	dirty[n] = true
}

// refreshAll lists the changed directories again. A directory that cannot
// be kept exact drops its whole tree (the next Build rescans it, and
// refuses with the reason if it still cannot).
func (c *Cache) refreshAll(dirty map[*node]bool) {
	for len(dirty) > 0 {
		var n *node
		for n = range dirty {
			break
		}
		delete(dirty, n)
		if c.nodes[n.path] != n {
			continue // dropped meanwhile
		}
		if err := c.refresh(n, dirty); err != nil {
			t := n.top()
			c.touchTree(t.path)
			c.drop(t, -1)
		}
	}
}

// refresh lists n again and brings its entries, specials and subdirectories
// up to date.
func (c *Cache) refresh(n *node, dirty map[*node]bool) error {
	if n.unlisted {
		return nil
	}
	fd, err := unix.Open(n.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Gone or replaced: its parent's events say so, or it was a root.
		if p := n.parent; p != nil {
			c.drop(n, -1)
			dirty[p] = true
			return nil
		}
		return err
	}
	defer unix.Close(fd)
	var sb unix.Stat_t
	if err := unix.Fstat(fd, &sb); err != nil {
		return err
	}
	if uint64(sb.Ino) != n.ino || uint64(sb.Dev) != n.dev {
		// Another directory now has this path (its events are queued).
		p := n.parent
		c.drop(n, -1)
		if p != nil {
			dirty[p] = true
			return nil
		}
		return errors.New("root replaced")
	}
	ents, err := readDir(fd, c.dirbuf)
	if err != nil {
		return err
	}
	c.forgetSpecials(n)
	n.add(len(ents)-n.entries, 0)
	n.entries = len(ents)
	seen := make(map[string]bool, len(n.dirs))
	b := &budget{maxEntries: c.capEntries(), maxDirs: c.capDirs(), root: n.path}
	for _, e := range ents {
		name := e.name
		if old := n.dirs[name]; old != nil {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && uint64(st.Ino) == old.ino && uint64(st.Dev) == old.dev && !SecretFileName(name) {
				seen[name] = true
				// Still the same directory: only its specials (none for an
				// ordinary name) need a look.
				c.classifyOnly(fd, n, name)
				continue
			}
			c.drop(old, -1)
		}
		sub, err := c.entry(fd, n, name, e.typ, b)
		if sub != nil {
			seen[name] = true
			if sub.parent == n && n.dirs[name] != sub {
				n.dirs[name] = sub
				n.add(sub.subEntries, sub.subDirs)
			}
		}
		if err != nil {
			return err
		}
	}
	for name, d := range n.dirs {
		if !seen[name] {
			c.drop(d, -1)
		}
	}
	return nil
}

// classifyOnly records the specials of an entry without descending.
func (c *Cache) classifyOnly(fd int, n *node, name string) {
	secret := SecretFileName(name)
	guarded, _ := n.state.child(name)
	if !secret && !guarded {
		return
	}
	var sb unix.Stat_t
	if unix.Fstatat(fd, name, &sb, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	s := &special{path: n.path + "/" + name, secret: secret, guard: guarded, mode: modeOf(uint32(sb.Mode)), dev: uint64(sb.Dev), ino: uint64(sb.Ino)}
	n.specials[name] = s
	if secret {
		c.secrets[s.path] = s
	}
	if guarded {
		c.guards[s.path] = s
	}
}

// touchPath marks dirty every open window one of whose mounts path is, or
// lies below: a move or removal there can leave a mask on the wrong file.
func (c *Cache) touchPath(path string) {
	for w := range c.windows {
		if w.dests[path] {
			w.setDirty(fmt.Errorf("%s was moved or removed", path))
		}
	}
}

// touchTree marks dirty every open window with a scanned root at, above or
// below path.
func (c *Cache) touchTree(path string) {
	for w := range c.windows {
		for _, r := range w.roots {
			if within(r, path) || within(path, r) {
				w.setDirty(fmt.Errorf("the tree at %s was moved, removed or could not be followed", path))
				break
			}
		}
	}
}

// ensure makes sure the tree at root is scanned and watched, within b.
func (c *Cache) ensure(root string, b *budget) error {
	b.root = root
	if n := c.nodes[root]; n != nil {
		b.entries += n.subEntries
		b.dirs += n.subDirs
		if b.over() {
			return b.err()
		}
		return nil
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("sandbox: grant %s: %w", root, err)
	}
	if !fi.IsDir() {
		return nil // a file grant: nothing below it
	}
	parent, err := unix.Open(filepath.Dir(root), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|oPath, 0)
	if err != nil {
		return fmt.Errorf("sandbox: grant %s: %w", root, err)
	}
	defer unix.Close(parent)
	n, err := c.scanAt(parent, filepath.Base(root), root, nil, autorunStateOf(root), b)
	if err != nil {
		if n != nil {
			c.drop(n, -1)
		}
		return err
	}
	if n == nil {
		return fmt.Errorf("sandbox: grant %s changed while it was searched for secrets: %w: %w", root, ErrTreeChanged, ErrUnsafePath)
	}
	// Trees scanned before for grants inside this one are now part of it.
	return nil
}

// reprobe rescans directories found unlisted that have become listable.
func (c *Cache) reprobe(roots []string) {
	for path, n := range c.unlisted {
		if !slices.ContainsFunc(roots, func(r string) bool { return within(path, r) }) {
			continue
		}
		if unix.Access(path, unix.R_OK) != nil {
			continue
		}
		p := n.parent
		c.drop(n, -1)
		if p != nil {
			c.refreshAll(map[*node]bool{p: true})
		}
	}
}

// evict forgets trees no call used for rootIdleTTL, and the least recently
// used ones past the cache's cap, but never one an open window uses.
func (c *Cache) evict(keep []string) {
	now := c.now()
	// Idleness is counted in minutes: looking once a second is enough, and
	// keeps the hot path from visiting every tree on every call.
	if now.Sub(c.lastEvict) < time.Second && now.After(c.lastEvict) {
		return
	}
	c.lastEvict = now
	inUse := func(r string) bool {
		if slices.Contains(keep, r) {
			return true
		}
		for w := range c.windows {
			if slices.Contains(w.roots, r) {
				return true
			}
		}
		return false
	}
	for r, at := range c.roots {
		if now.Sub(at) > rootIdleTTL && !inUse(r) {
			c.forgetRoot(r)
		}
	}
	for c.trackedDirs() > c.capDirs() {
		oldest, at := "", time.Time{}
		for r, t := range c.roots {
			if !inUse(r) && (oldest == "" || t.Before(at)) {
				oldest, at = r, t
			}
		}
		if oldest == "" {
			return
		}
		c.forgetRoot(oldest)
	}
}

func (c *Cache) trackedDirs() int {
	total := 0
	for _, n := range c.nodes {
		if n.parent == nil {
			total += n.subDirs
		}
	}
	return total
}

// forgetRoot stops watching root's tree, except the parts other roots
// still need.
func (c *Cache) forgetRoot(root string) {
	delete(c.roots, root)
	for r := range c.roots {
		if within(root, r) {
			return // inside another root's tree: that tree stays whole
		}
	}
	n := c.nodes[root]
	if n == nil {
		return
	}
	// Detach the trees of roots inside this one, then drop the rest.
	for r := range c.roots {
		if r != root && within(r, root) {
			if inner := c.nodes[r]; inner != nil && inner.parent != nil {
				p := inner.parent
				delete(p.dirs, filepath.Base(inner.path))
				p.add(-inner.subEntries, -inner.subDirs)
				inner.parent = nil
			}
		}
	}
	c.drop(n, -1)
}

// relTo is path relative to dir (slash-separated, "" for dir itself).
func relTo(path, dir string) string {
	if path == dir {
		return ""
	}
	if dir == "/" {
		return strings.TrimPrefix(path, "/")
	}
	return strings.TrimPrefix(path, dir+"/")
}
