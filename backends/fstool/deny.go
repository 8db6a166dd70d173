package fstool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// denyList is what the OS sandbox hides from programs even inside their
// grants, applied to the file tools too so that fs.read cannot fetch what
// Exec could not see: the decision's fs_deny, the gateway user's credential
// stores (sandbox.HomeSecrets) and .env files and directories.
type denyList struct {
	paths []string // real, clean, absolute
}

// newDenyList is the deny list of one call: the decision's fs_deny,
// resolved now, and the credential stores' real paths from secrets.
func newDenyList(fsDeny []string, secrets []string) denyList {
	d := denyList{paths: make([]string, 0, len(fsDeny)+len(secrets))}
	for _, p := range fsDeny {
		if p, ok := realOrClean(p); ok {
			d.paths = append(d.paths, p)
		}
	}
	d.paths = append(d.paths, secrets...)
	return d
}

// realOrClean is p resolved through symlinks, or only cleaned when it does
// not resolve (a missing file is still denied by name); ok is false for a
// relative path.
func realOrClean(p string) (string, bool) {
	if !filepath.IsAbs(p) {
		return "", false
	}
	p = filepath.Clean(p)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p, true
}

// homeSecretsTTL is how long a resolution of the credential stores is
// reused. Resolving them costs a dozen EvalSymlinks per call (about a
// tenth of an fs.read's CPU); a store moved or relinked is seen within
// this long. Whoever can relink the gateway user's home can read it
// anyway, so the window hides nothing the deny list could have protected.
const homeSecretsTTL = time.Second

// homeSecrets caches the real paths of the gateway user's credential
// stores, shared by the five tools.
type homeSecrets struct {
	mu    sync.Mutex
	at    time.Time
	paths []string // never mutated once published
	now   func() time.Time
	home  func() (string, error)
}

func newHomeSecrets() *homeSecrets {
	return &homeSecrets{now: time.Now, home: os.UserHomeDir}
}

// get returns the stores' real paths, resolved at most homeSecretsTTL ago.
func (h *homeSecrets) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if h.paths != nil && now.Sub(h.at) < homeSecretsTTL && !now.Before(h.at) {
		return h.paths
	}
	paths := []string{}
	if home, err := h.home(); err == nil && home != "/" {
		for _, s := range sandbox.HomeSecrets {
			if p, ok := realOrClean(filepath.Join(home, s)); ok {
				paths = append(paths, p)
			}
		}
	}
	h.paths, h.at = paths, now
	return paths
}

// hides reports whether real (rel below its grant) is hidden.
func (d denyList) hides(real, rel string) bool {
	for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(seg, ".env") {
			return true
		}
	}
	for _, p := range d.paths {
		if within(real, p) {
			return true
		}
	}
	return false
}

// check refuses a target the deny list hides.
func (d denyList) check(t target) error {
	if !d.hides(t.real, t.rel) {
		return nil
	}
	return &wire.Error{Code: wire.CodeFSDenied,
		Message: fmt.Sprintf("%s %s is hidden from tools (the policy's fs_deny, a credential store, or a .env file), even inside the grant", t.ref.field, t.real),
		Details: map[string]any{"field": t.ref.field, "path": t.real}}
}
