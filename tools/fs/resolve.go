package fstool

import (
	"errors"
	"path"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// maxLinkHops bounds the symlinks one resolution follows, as the kernel's
// 40 does.
const maxLinkHops = 40

// resolution is an absolute path as realpath(3) sees it, plus where the
// symlinks it went through are, so that the caller can tell an operator's
// link above a grant (/home -> /data/home) from one planted inside it.
type resolution struct {
	real   string   // symlinks of the existing prefix resolved, the missing rest appended
	links  []string // the real path of every symlink followed
	broken bool     // a symlink dangles or loops
	exists bool     // real exists; st is its lstat
	st     unix.Stat_t
}

// resolvePath resolves abs (absolute and clean) component by component
// with lstat and readlink. Failures are not errors: a missing or
// unreachable rest is appended as written.
func resolvePath(abs string) resolution {
	var r resolution
	rest := splitComponents(abs, nil)
	cur := "/"
	fromLink := 0 // rest[:fromLink] came from a link's target
	hops := 0
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if i == fromLink {
			fromLink = 0
		}
		if c == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		if err := unix.Lstat(next, &r.st); err != nil {
			// A dangling link: the missing name came from its target.
			r.broken = r.broken || i < fromLink
			r.real = path.Join(append([]string{cur}, rest[i:]...)...)
			return r
		}
		if fileType(&r.st) != unix.S_IFLNK {
			cur = next
			continue
		}
		hops++
		target, err := readlink(next)
		if hops > maxLinkHops || err != nil || target == "" {
			r.broken = true
			r.real = path.Join(append([]string{next}, rest[i+1:]...)...)
			return r
		}
		r.links = append(r.links, next)
		if target[0] == '/' {
			cur = "/"
		}
		tc := splitComponents(target, nil)
		remaining := rest[i+1:]
		fromLink = len(tc) + max(0, fromLink-(i+1))
		rest = append(tc, remaining...)
		i = -1
	}
	r.real = cur
	if cur == "/" {
		if err := unix.Lstat("/", &r.st); err != nil {
			return r
		}
	}
	r.exists = true
	return r
}

// splitComponents appends the non-empty, non-"." components of p.
func splitComponents(p string, out []string) []string {
	for p != "" {
		var c string
		c, p, _ = strings.Cut(p, "/")
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func readlink(p string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlink(p, buf)
		if errors.Is(err, unix.EINTR) {
			size /= 4
			continue
		}
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

// resolveTTL is how long a resolution of an operator-given path (a grant,
// an fs_deny entry) is reused. Resolving costs an lstat per component on
// every call; nothing is trusted from the cache but the path: every use
// opens the grant's directory again and checks its identity, and a stale
// entry is resolved afresh.
const resolveTTL = time.Second

// maxCached bounds the cache; past it the cache starts over.
const maxCached = 1024

// resolveCache caches resolutions of operator-given paths, shared by the
// five tools. Agent-given paths are never cached.
type resolveCache struct {
	mu  sync.RWMutex
	m   map[string]cachedResolution
	now func() time.Time
}

type cachedResolution struct {
	r  resolution
	at time.Time
}

func newResolveCache() *resolveCache {
	return &resolveCache{m: map[string]cachedResolution{}, now: time.Now}
}

// get resolves abs, or returns a resolution made less than resolveTTL ago.
// Only resolutions of existing directories are reused when dir is set, so
// that a grant directory created a moment ago is seen at once.
func (c *resolveCache) get(abs string, dir bool) resolution {
	now := c.now()
	c.mu.RLock()
	e, ok := c.m[abs]
	c.mu.RUnlock()
	if ok && now.Sub(e.at) < resolveTTL && !now.Before(e.at) && (!dir || (e.r.exists && fileType(&e.r.st) == unix.S_IFDIR)) {
		return e.r
	}
	r := resolvePath(abs)
	c.mu.Lock()
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	c.m[abs] = cachedResolution{r: r, at: now}
	c.mu.Unlock()
	return r
}

// forget drops abs, after its cached resolution turned out stale.
func (c *resolveCache) forget(abs string) {
	c.mu.Lock()
	delete(c.m, abs)
	c.mu.Unlock()
}
