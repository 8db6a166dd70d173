package fstool

import (
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// What the file tools hide even inside a grant, as the OS sandbox hides it
// from programs, so that fs.read cannot fetch what Exec could not see:
//
//   - secret-shaped names (sandbox.SecretFileName: .env*, credential
//     stores, private keys) at every depth below a grant, checked on every
//     component the tools open (fs_denied; skipped in fs.list/fs.search);
//   - the decision's fs_deny and the gateway user's credential stores
//     (sandbox.HomeSecrets), by path and by identity: a denied directory
//     or file reached under another name (renamed, hard-linked, bind
//     mounted) is still recognized by its device and inode.

// denyEntry is one denied path.
type denyEntry struct {
	path string // real (or clean, when it does not resolve)
	why  string // for messages: "the policy's fs_deny" or "a credential store"
}

// watched is the identity of something the walk must not pass through:
// a denied file or directory, or (for writes) a read-only grant's root.
type watched struct {
	id   ident
	path string
	why  string
}

// denyList is the deny list of one call.
type denyList struct {
	entries []denyEntry
	paths   []string  // entries' paths: what the scope records as fs_deny
	ids     []watched // identities of the entries that exist
}

// newDenyList is the deny list of one call: the decision's fs_deny (each
// denied as written and as resolved) and the credential stores.
func newDenyList(fsDeny []string, home homeEntries, cache *resolveCache) denyList {
	if len(fsDeny) == 0 {
		return home.list // shared, never mutated
	}
	d := denyList{
		entries: make([]denyEntry, 0, 2*len(fsDeny)+len(home.list.entries)),
		ids:     make([]watched, 0, len(fsDeny)+len(home.list.ids)),
	}
	for _, p := range fsDeny {
		if !path.IsAbs(p) {
			continue // the policy engine refuses these; never widen access
		}
		p = path.Clean(p)
		d.add(p, cache.get(p, false), "the policy's fs_deny")
	}
	d.entries = append(d.entries, home.list.entries...)
	d.ids = append(d.ids, home.list.ids...)
	d.paths = make([]string, len(d.entries))
	for i, e := range d.entries {
		d.paths[i] = e.path
	}
	return d
}

// add denies p as written and as resolved, and its identity if it exists.
func (d *denyList) add(p string, r resolution, why string) {
	d.entries = append(d.entries, denyEntry{path: p, why: why})
	if r.real != p && r.real != "" {
		d.entries = append(d.entries, denyEntry{path: r.real, why: why})
	}
	if r.exists {
		d.ids = append(d.ids, watched{id: identOf(&r.st), path: r.real, why: why})
	}
}

// byPath returns why real is denied, if it is: it lies in a denied path.
func (d *denyList) byPath(real string) (denyEntry, bool) {
	for _, e := range d.entries {
		if within(real, e.path) {
			return e, true
		}
	}
	return denyEntry{}, false
}

// under returns the entries that lie inside dir: the only ones a walk of
// dir can meet by path.
func (d *denyList) under(dir string) []denyEntry {
	var out []denyEntry
	for _, e := range d.entries {
		if within(e.path, dir) {
			out = append(out, e)
		}
	}
	return out
}

// byID returns the denied file or directory st is, if it is one.
func (d *denyList) byID(st *unix.Stat_t) (watched, bool) {
	id := identOf(st)
	for _, w := range d.ids {
		if w.id == id {
			return w, true
		}
	}
	return watched{}, false
}

// homeSecretsTTL is how long a resolution of the credential stores is
// reused. Resolving them costs a dozen lstat chains per call; a store
// moved or relinked is seen within this long. Whoever can relink the
// gateway user's home can read it anyway, so the window hides nothing the
// deny list could have protected.
const homeSecretsTTL = time.Second

// homeEntries is a resolution of the credential stores.
type homeEntries struct {
	list denyList
}

// homeSecrets caches the credential stores' paths and identities, shared
// by the five tools.
type homeSecrets struct {
	mu   sync.Mutex
	at   time.Time
	have bool
	res  homeEntries // never mutated once published
	now  func() time.Time
	home func() (string, error)
}

func newHomeSecrets() *homeSecrets {
	return &homeSecrets{now: time.Now, home: os.UserHomeDir}
}

// get returns the stores, resolved at most homeSecretsTTL ago.
func (h *homeSecrets) get() homeEntries {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.have && now.Sub(h.at) < homeSecretsTTL && !now.Before(h.at) {
		return h.res
	}
	var d denyList
	if home, err := h.home(); err == nil && path.IsAbs(home) && path.Clean(home) != "/" {
		for _, s := range sandbox.HomeSecrets {
			p := path.Join(home, s)
			d.add(p, resolvePath(p), "a credential store of the gateway's user")
		}
	}
	d.paths = make([]string, len(d.entries))
	for i, e := range d.entries {
		d.paths[i] = e.path
	}
	h.res, h.at, h.have = homeEntries{list: d}, now, true
	return h.res
}

// secretRule names the rule that makes name secret-shaped, or "" when it
// is not (sandbox.SecretFileName decides; this only words the message).
func secretRule(name string) string {
	if !sandbox.SecretFileName(name) {
		return ""
	}
	n := strings.ToLower(name)
	switch {
	case strings.HasPrefix(n, ".env"):
		return ".env files hold secrets"
	case strings.HasPrefix(n, "id_"):
		return "an SSH private key"
	case strings.Contains(n, ".") && !strings.HasPrefix(n, "."):
		return "a private key or keystore file"
	}
	return "a credential store"
}

// checkSecretNames refuses a path with a secret-shaped component below
// base (the outermost grant holding it): rel is relative to base.
func checkSecretNames(p *pathRef, rel string) error {
	for c := range strings.SplitSeq(rel, "/") {
		if rule := secretRule(c); rule != "" {
			return &wire.Error{Code: wire.CodeFSDenied,
				Message: fmt.Sprintf("%s %q is hidden from the file tools: %q is a secret-shaped name (%s), hidden at every depth of every grant", p.field, p.raw, c, rule),
				Details: map[string]any{"field": p.field, "path": p.raw, "rule": "secret_name", "name": c}}
		}
	}
	return nil
}

// deniedByPath is the error for a path inside a denied one.
func deniedByPath(p *pathRef, e denyEntry) *wire.Error {
	return &wire.Error{Code: wire.CodeFSDenied,
		Message: fmt.Sprintf("%s %q is hidden from the file tools, even inside the grant: %s lies in %s (%s)", p.field, p.raw, p.real, e.path, e.why),
		Details: map[string]any{"field": p.field, "path": p.raw, "rule": "fs_deny"}}
}

// deniedByID is the error for a file or directory that is a denied one
// under another name.
func deniedByID(p *pathRef, w watched) *wire.Error {
	return &wire.Error{Code: wire.CodeFSDenied,
		Message: fmt.Sprintf("%s %q leads to %s (%s) under another name (renamed, linked or mounted there); it stays hidden from the file tools", p.field, p.raw, w.path, w.why),
		Details: map[string]any{"field": p.field, "path": p.raw, "rule": "fs_deny"}}
}

// checkAutorun is the autorun guard: a write to a file that runs later for
// someone else (sandbox.AutorunPath on rel, the path below the grant) is
// refused unless the grant sets allow_autorun.
func checkAutorun(p *pathRef, g grant, rel string) error {
	if g.AllowAutorun {
		return nil
	}
	reason, guarded := sandbox.AutorunPath(rel)
	if !guarded {
		return nil
	}
	return &wire.Error{Code: wire.CodeFSDenied,
		Message: fmt.Sprintf("%s %q is refused by the autorun guard: it is %s, which runs later for someone else; a policy can lift the guard for a grant with \"allow_autorun\": true", p.field, p.raw, reason),
		Details: map[string]any{"field": p.field, "path": p.raw, "rule": "autorun_guard"}}
}
