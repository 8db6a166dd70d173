package exectool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

// maxLinks bounds the symlinks followed while resolving one path, as the
// kernel's MAXSYMLINKS (40) does.
const maxLinks = 40

// errLinkLoop marks a path whose symlinks do not end.
var errLinkLoop = errors.New("too many levels of symbolic links")

// leadsTo returns where the absolute path p leads: its symlinks resolved
// as far as the path exists, following a link even when its target is
// missing, with the missing rest appended lexically. It never fails and
// never says whether anything exists: argv[0] and cwd are normalized
// before the policy and before the grants are known, so every answer about
// a host path must wait until Enforce has checked the path against the
// grants. Otherwise a caller with no grant learns which host files exist
// (issue #13: "does not exist" for a missing path, fs_denied for an
// existing one), even through a dangling symlink it planted in a writable
// grant, which this follows to its target. A symlink loop leads to p
// itself, cleaned.
func leadsTo(p string) string {
	out, _ := leadsToVisiting(p, nil)
	return out
}

// leadsToVisiting is leadsTo, calling visit (when not nil) with each
// directory whose entries the answer depends on, before it looks in it;
// visit's error stops the walk and is returned (the answer is then still
// leadsTo's, from a walk without visit).
func leadsToVisiting(p string, visit func(dir string) error) (string, error) {
	out, err := walk(filepath.Clean(p), visit)
	if errors.Is(err, errLinkLoop) {
		return filepath.Clean(p), nil
	}
	if err != nil {
		return leadsTo(p), err
	}
	return out, nil
}

// walk resolves clean absolute p component by component; visit, when not
// nil, is told each directory before a name is looked up in it.
func walk(p string, visit func(dir string) error) (string, error) {
	todo := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur, links := "/", 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		if visit != nil {
			if err := visit(cur); err != nil {
				return "", err
			}
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			// Missing, not a directory, or not searchable: the rest is
			// only a name.
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", errLinkLoop
		}
		target, err := os.Readlink(next)
		if err != nil {
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return cur, nil
}

// checkExecutable is argv[0]'s second check, made only once real is known
// to lie inside the grants: an existing regular file with an execute bit.
// given is the path as the caller sent it, for the message.
func checkExecutable(real, given string) error {
	const want = "argv[0] must be the absolute path of an existing executable file inside the granted paths, e.g. /usr/bin/git (no PATH lookup)"
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return strictjson.Invalid("argv[0]", "argv[0] %q does not exist or is a dangling link; %s", given, want)
	case !fi.Mode().IsRegular():
		return strictjson.Invalid("argv[0]", "argv[0] %q is not a regular file; %s", given, want)
	case fi.Mode().Perm()&0o111 == 0:
		return strictjson.Invalid("argv[0]", "argv[0] %q is not executable; %s", given, want)
	}
	return nil
}

// checkDir is cwd's second check, made only once real is known to lie
// inside the grants: an existing directory.
func checkDir(real, given string) error {
	const want = "cwd must be the absolute path of an existing directory inside the granted paths"
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return strictjson.Invalid("cwd", "cwd %q does not exist; %s", given, want)
	case !fi.IsDir():
		return strictjson.Invalid("cwd", "cwd %q is not a directory; %s", given, want)
	}
	return nil
}
