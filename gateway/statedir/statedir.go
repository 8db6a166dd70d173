// Package statedir gives each run its own state directory: the @state
// alias of a filesystem grant.
//
// A policy grants {"alias": "@state", "mode": "rw"} with no path; the
// gateway, not the policy and not the agent, picks the directory. It is
// <root>/p-<hp>/<h>, where hp is the SHA-256 of the principal and h that of
// the principal and the session id, so two sessions (or two principals with
// the same session id) never share one, and a session cannot name
// another's. The root and every state directory are 0700 and owned by the
// gateway. A call without a session id has no run to scope the directory
// to, so its @state grant is dropped.
//
// Session ids are the caller's, so a principal could make a directory per
// call by varying them. Each principal may hold at most MaxPerPrincipal
// state directories at a time; a call that would make one more is refused
// (a *LimitError) until retention frees one.
//
// State is removed by retention: a directory not used by any call for
// Retention is swept. Each Bind marks the directory used (its mtime), so a
// live run keeps its state however long it lasts, and the sweep and Bind
// are serialized so a directory is never swept under a call that just
// bound it.
package statedir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// DefaultRetention is how long an unused state directory is kept.
const DefaultRetention = 7 * 24 * time.Hour

// DefaultMaxPerPrincipal is how many state directories one principal may
// hold at a time unless configured otherwise.
const DefaultMaxPerPrincipal = 256

// LimitError says a principal already holds its maximum of state
// directories, and when the oldest of them falls out of retention.
type LimitError struct {
	Max        int
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("the principal already holds %d state directories (the most it may); one frees in %s", e.Max, e.RetryAfter.Round(time.Second))
}

// Dirs hands out and sweeps the state directories under one root.
type Dirs struct {
	root      string
	retention time.Duration
	max       int
	log       *slog.Logger
	now       func() time.Time

	mu sync.Mutex // serializes Bind's mark with the sweep's check-and-remove
}

// Options configure Dirs.
type Options struct {
	// Root holds the state directories (created 0700 on first use). It
	// must be absolute.
	Root string
	// Retention is how long a directory no call used is kept
	// (DefaultRetention when zero).
	Retention time.Duration
	// MaxPerPrincipal caps the state directories one principal holds
	// (DefaultMaxPerPrincipal when zero).
	MaxPerPrincipal int
	Logger          *slog.Logger
	Now             func() time.Time
}

// New returns the state directories under opts.Root. It does no I/O.
func New(opts Options) (*Dirs, error) {
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("statedir: root %q is not absolute", opts.Root)
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxPerPrincipal <= 0 {
		opts.MaxPerPrincipal = DefaultMaxPerPrincipal
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Dirs{root: filepath.Clean(opts.Root), retention: opts.Retention, max: opts.MaxPerPrincipal, log: opts.Logger, now: opts.Now}, nil
}

// Root is the directory holding the state directories.
func (d *Dirs) Root() string { return d.root }

// PrincipalName is the name of the directory under the root that holds a
// principal's state directories.
func PrincipalName(principalID string) string {
	h := sha256.New()
	h.Write([]byte("portcullis/state/principal/v1\x00"))
	h.Write([]byte(principalID))
	return principalPrefix + hex.EncodeToString(h.Sum(nil))[:40]
}

const principalPrefix = "p-"

// Rel is a principal's session's state directory relative to the root.
func Rel(principalID, sessionID string) string {
	return filepath.Join(PrincipalName(principalID), Name(principalID, sessionID))
}

// Name is the state directory's name for a principal's session (inside
// the principal's directory).
func Name(principalID, sessionID string) string {
	h := sha256.New()
	h.Write([]byte("portcullis/state/v1\x00"))
	h.Write([]byte(principalID))
	h.Write([]byte{0})
	h.Write([]byte(sessionID))
	return hex.EncodeToString(h.Sum(nil))[:40]
}

// Bind fills in the path of every @state grant among grants with the
// call's state directory, creating it if needed. Without a session id the
// @state grants are dropped, and a note says so. Grants other than @state
// pass through unchanged; the result is a new slice when anything changed.
func (d *Dirs) Bind(ctx context.Context, principalID, sessionID string, grants []wire.FSGrant) ([]wire.FSGrant, []string, error) {
	i := stateIndex(grants)
	if i < 0 {
		return grants, nil, nil
	}
	if sessionID == "" {
		return withoutState(grants), []string{"@state grant dropped: the call has no session_id to scope its state directory to"}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	dir, err := d.ensure(PrincipalName(principalID), Name(principalID, sessionID))
	if err != nil {
		return nil, nil, err
	}
	out := make([]wire.FSGrant, 0, len(grants))
	for _, g := range grants {
		if g.Alias == wire.AliasState {
			g.Path = dir
		}
		out = append(out, g)
	}
	return out, nil, nil
}

// Unbound drops @state grants, for a gateway with no state directories:
// the policy asked for something this gateway cannot give.
func Unbound(grants []wire.FSGrant) ([]wire.FSGrant, []string) {
	if stateIndex(grants) < 0 {
		return grants, nil
	}
	return withoutState(grants), []string{"@state grant dropped: this gateway has no state directories"}
}

func stateIndex(grants []wire.FSGrant) int {
	for i, g := range grants {
		if g.Alias == wire.AliasState {
			return i
		}
	}
	return -1
}

func withoutState(grants []wire.FSGrant) []wire.FSGrant {
	out := make([]wire.FSGrant, 0, len(grants))
	for _, g := range grants {
		if g.Alias != wire.AliasState {
			out = append(out, g)
		}
	}
	return out
}

// ensure creates (or reuses) root/principal/name as a private directory
// and marks it used now. Making a new one when the principal already holds
// its maximum is refused with a *LimitError.
func (d *Dirs) ensure(principal, name string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ensurePrivateDir(d.root); err != nil {
		return "", fmt.Errorf("state root: %w", err)
	}
	pdir := filepath.Join(d.root, principal)
	if err := ensurePrivateDir(pdir); err != nil {
		return "", fmt.Errorf("principal state directory: %w", err)
	}
	dir := filepath.Join(pdir, name)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := d.checkRoom(pdir); err != nil {
			return "", err
		}
	}
	if err := ensurePrivateDir(dir); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	now := d.now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	return dir, nil
}

// checkRoom answers a *LimitError when pdir already holds the most state
// directories a principal may.
func (d *Dirs) checkRoom(pdir string) error {
	ents, err := os.ReadDir(pdir)
	if err != nil {
		return fmt.Errorf("principal state directory: %w", err)
	}
	n, oldest := 0, time.Time{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		n++
		if fi, err := e.Info(); err == nil && (oldest.IsZero() || fi.ModTime().Before(oldest)) {
			oldest = fi.ModTime()
		}
	}
	if n < d.max {
		return nil
	}
	return &LimitError{Max: d.max, RetryAfter: max(oldest.Add(d.retention).Sub(d.now()), time.Second)}
}

// ensurePrivateDir makes dir a directory of ours that only we can use: it
// is created 0700 when missing, and an existing one must be a real
// directory (not a symlink planted in its place) owned by this process's
// user; its mode is forced back to 0700.
func ensurePrivateDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if !ownedByUs(fi) {
		return fmt.Errorf("%s is not owned by the gateway's user", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// Sweep removes the state directories no call has used for the
// retention, and answers how many it removed. A directory is first
// renamed out of the way (under the lock that Bind takes, so a call
// binding it now either gets it before the rename or a fresh one after),
// then removed without following symlinks inside it. A principal's
// directory left empty is removed too. Directories of the earlier flat
// layout (root/<h>) are swept by the same rule.
func (d *Dirs) Sweep(ctx context.Context) (int, error) {
	ents, err := os.ReadDir(d.root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("statedir sweep: %w", err)
	}
	cutoff := d.now().Add(-d.retention)
	removed := 0
	var errs []error
	for _, e := range ents {
		if ctx.Err() != nil {
			break
		}
		name := e.Name()
		if !strings.HasPrefix(name, principalPrefix) || !e.IsDir() {
			n, err := d.sweepOne(d.root, name, cutoff)
			removed += n
			errs = append(errs, err)
			continue
		}
		pdir := filepath.Join(d.root, name)
		sub, err := os.ReadDir(pdir)
		if err != nil {
			errs = append(errs, fmt.Errorf("statedir sweep: %w", err))
			continue
		}
		for _, se := range sub {
			if ctx.Err() != nil {
				break
			}
			n, err := d.sweepOne(pdir, se.Name(), cutoff)
			removed += n
			errs = append(errs, err)
		}
		errs = append(errs, d.dropIfEmpty(pdir))
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes parent/name when it is a sweep's leftover trash or a
// state directory unused since cutoff, and answers how many state
// directories it removed (0 or 1).
func (d *Dirs) sweepOne(parent, name string, cutoff time.Time) (int, error) {
	if strings.HasPrefix(name, ".") {
		// A trash directory a sweep left behind (crash mid-removal).
		return 0, os.RemoveAll(filepath.Join(parent, name))
	}
	trash, err := d.evict(parent, name, cutoff)
	if err != nil || trash == "" {
		return 0, err
	}
	if err := os.RemoveAll(trash); err != nil {
		return 0, err
	}
	return 1, nil
}

// dropIfEmpty removes a principal's directory that holds nothing, under
// the lock Bind takes (so never between Bind making it and using it).
func (d *Dirs) dropIfEmpty(pdir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ents, err := os.ReadDir(pdir)
	if err != nil || len(ents) > 0 {
		return nil
	}
	if err := os.Remove(pdir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// evict renames parent/name to a trash name when it was last used before
// cutoff, and answers the trash path ("" when it is kept).
func (d *Dirs) evict(parent, name string, cutoff time.Time) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := filepath.Join(parent, name)
	fi, err := os.Lstat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", err
	}
	if !fi.ModTime().Before(cutoff) {
		return "", nil
	}
	trash := filepath.Join(parent, ".swept-"+name)
	if err := os.Rename(dir, trash); err != nil {
		return "", err
	}
	return trash, nil
}

// Run sweeps every interval until ctx ends.
func (d *Dirs) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := d.Sweep(ctx)
		if err != nil {
			d.log.WarnContext(ctx, "state directory sweep failed", "err", err)
		}
		if n > 0 {
			d.log.InfoContext(ctx, "state directories swept", "removed", n, "retention", d.retention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SweepInterval is how often a gateway with retention r sweeps: a tenth
// of it, between a minute and an hour.
func SweepInterval(r time.Duration) time.Duration {
	return min(max(r/10, time.Minute), time.Hour)
}
