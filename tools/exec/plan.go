package exectool

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

// MaxResolvedPaths bounds how many arguments Resolved reports path facts
// for (input.resolved.paths); later arguments are null there, and are
// still resolved and checked at enforcement when the policy names them.
const MaxResolvedPaths = 256

// HomeToken in a forced argument becomes the call's private HOME.
const HomeToken = "${HOME}"

// argPath is one argument that may name a path, resolved: what policy sees
// in input.resolved.paths and what enforcement holds against the grants.
type argPath struct {
	raw  string // the path as the caller wrote it (the value after "=" for an option)
	real string // real absolute path: the longest existing prefix with symlinks resolved, the rest appended; "" when relative without cwd
	err  error  // resolving failed other than by a missing component (a loop, a permission error)
}

// pathValue is the path an argument names: the argument itself, or for
// value, the part after its first "=".
func pathValue(arg string, value bool) (string, bool) {
	if !value {
		return arg, true
	}
	_, v, ok := strings.Cut(arg, "=")
	return v, ok
}

// resolveArgPath resolves p against cwd ("" when the call has none) the
// way the kernel will: symlinks followed, ".." applied to what they
// resolved to. A missing component ends the resolution; the rest is
// appended as written (and cleaned), which can only name something that
// does not exist yet.
func resolveArgPath(cwd, p string) argPath {
	a := argPath{raw: p}
	abs := p
	if !filepath.IsAbs(p) {
		if cwd == "" {
			return a
		}
		abs = cwd + "/" + p
	}
	parts := strings.Split(abs, "/")
	// The longest prefix that resolves, tried from the whole path down.
	for k := len(parts); k >= 1; k-- {
		prefix := strings.Join(parts[:k], "/")
		if prefix == "" {
			prefix = "/"
		}
		real, err := filepath.EvalSymlinks(prefix)
		if err == nil {
			a.real = filepath.Clean(real + "/" + strings.Join(parts[k:], "/"))
			return a
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			a.err = err
			return a
		}
	}
	a.err = errors.New("no component resolves")
	return a
}

// resolvedPaths are the path facts of every argument (Resolved): for an
// operand the path it names, for "--opt=value" the value's, for other
// options null. Computed once per call.
func (c *call) resolvedPaths() []argPath {
	c.pathsOnce.Do(func() {
		n := min(len(c.in.argv), MaxResolvedPaths+1)
		c.paths = make([]argPath, n)
		for i := 1; i < n; i++ {
			arg := c.in.argv[i]
			if strings.HasPrefix(arg, "-") {
				if v, ok := pathValue(arg, true); ok && v != "" {
					c.paths[i] = resolveArgPath(c.in.cwd, v)
				}
				continue
			}
			c.paths[i] = resolveArgPath(c.in.cwd, arg)
		}
	})
	return c.paths
}

// pathFacts renders resolvedPaths for policy input: an array aligned with
// argv, null where an argument names no path.
func (c *call) pathFacts() []any {
	paths := c.resolvedPaths()
	out := make([]any, len(c.in.argv))
	for i := 1; i < len(paths); i++ {
		p := paths[i]
		if p.raw == "" {
			continue
		}
		fact := map[string]any{"path": p.real}
		if strings.HasPrefix(c.in.argv[i], "-") {
			fact["value"] = true
		}
		out[i] = fact
	}
	return out
}

// enforcePlan holds the decision's Exec plan against the request and the
// grants: every path argument must resolve inside a grant, below it name
// nothing secret-shaped, and lie outside fs_deny; the forced arguments
// must fit the argv; the exec restriction is resolved to real paths. It
// returns the plan as enforced, for the scope. A malformed plan is the
// policy's bug and fails closed (internal).
func (c *call) enforcePlan(plan *wire.ExecPlan, grants []wire.FSGrant, deny []string) (*wire.ExecPlan, []string, error) {
	if plan == nil {
		return nil, nil, nil
	}
	n := len(c.in.argv)
	out := &wire.ExecPlan{ExecRestrict: plan.ExecRestrict}
	for _, ins := range plan.Insert {
		if ins.At < 1 || ins.At > n || len(ins.Args) == 0 {
			return nil, nil, wire.Errorf(wire.CodeInternal, "the policy inserts arguments at %d, outside argv (1 to %d)", ins.At, n)
		}
		for _, a := range ins.Args {
			if a == "" || strings.IndexByte(a, 0) >= 0 {
				return nil, nil, wire.Errorf(wire.CodeInternal, "the policy inserts an empty argument or one with a NUL")
			}
		}
		out.Insert = append(out.Insert, wire.ArgInsert{At: ins.At, Args: slices.Clone(ins.Args)})
	}
	slices.SortStableFunc(out.Insert, func(a, b wire.ArgInsert) int { return a.At - b.At })

	paths := c.resolvedPaths()
	seen := map[int]bool{}
	for _, pa := range plan.PathArgs {
		if pa.Index < 1 || pa.Index >= n {
			return nil, nil, wire.Errorf(wire.CodeInternal, "the policy names argv[%d] as a path, outside argv (1 to %d)", pa.Index, n-1)
		}
		field := "argv[" + strconv.Itoa(pa.Index) + "]"
		v, ok := pathValue(c.in.argv[pa.Index], pa.Value)
		if !ok {
			return nil, nil, wire.Errorf(wire.CodeInternal, "the policy names the value of %s as a path, but it has no '='", field)
		}
		var p argPath
		if pa.Index < len(paths) && paths[pa.Index].raw == v {
			p = paths[pa.Index]
		} else {
			p = resolveArgPath(c.in.cwd, v)
		}
		if err := c.checkPath(field, p, grants, deny); err != nil {
			return nil, nil, err
		}
		if !seen[pa.Index] {
			seen[pa.Index] = true
			out.PathArgs = append(out.PathArgs, wire.PathArg{Index: pa.Index, Value: pa.Value})
		}
	}

	var allow []string
	if plan.ExecRestrict {
		if process.LandlockABI() < 1 {
			return nil, nil, &wire.Error{
				Code:    wire.CodeSandboxUnavailable,
				Message: "this Exec profile restricts what the program may execute, which needs Landlock (Linux 5.13 or later, enabled); this host has none, so the call is refused rather than run unrestricted",
				Details: map[string]any{"field": "argv[0]"},
			}
		}
		allow = c.tool.res.execChain(c.in.argv0)
		// An entry relative to argv[0]'s directory ("../pkg/tool" for
		// go) is the caller's to plant when argv[0] lies in a writable
		// grant: a program of its own with that name, next to a symlink
		// to /usr/bin, would bring all of /usr/bin. Such entries are left
		// out (the program cannot execute them: closed).
		planted := false
		for _, g := range grants {
			if g.Mode == "rw" && within(c.in.argv0, g.Path) {
				planted = true
			}
		}
		for _, e := range plan.ExecAllow {
			p := e
			if !filepath.IsAbs(p) {
				if planted {
					continue
				}
				p = filepath.Join(filepath.Dir(c.in.argv0), p)
			}
			if real, err := filepath.EvalSymlinks(p); err == nil && !slices.Contains(allow, real) {
				allow = append(allow, real)
			}
		}
		out.ExecAllow = allow
		if allow == nil {
			allow = []string{}
		}
	}
	return out, allow, nil
}

// checkPath holds one path argument against the grants and deny rules.
// Its refusals never say whether something outside every grant exists:
// the message is the same for a missing file, a file, and a link to one.
func (c *call) checkPath(field string, p argPath, grants []wire.FSGrant, deny []string) error {
	refuse := func(why string) error {
		return &wire.Error{
			Code:    wire.CodeFSDenied,
			Message: fmt.Sprintf("%s (%q) %s; name a file inside %s", field, truncate(p.raw, 200), why, grantList(grants)),
			Details: map[string]any{"field": field},
		}
	}
	for _, part := range strings.Split(p.raw, "/") {
		if sandbox.SecretFileName(part) {
			return refuse("names a secret-shaped file (.env, keys, credential stores), which Exec never reads")
		}
	}
	if p.real == "" && p.err == nil {
		// Relative without cwd: it names something in the call's fresh,
		// empty working directory, unless it climbs out of it.
		if !filepath.IsLocal(p.raw) {
			return refuse("is relative and climbs out of the working directory, and no cwd was given")
		}
		return nil
	}
	if p.err != nil {
		return refuse("is outside the granted paths")
	}
	var root string
	for _, g := range grants {
		if within(p.real, g.Path) && len(g.Path) >= len(root) {
			root = g.Path
		}
	}
	if root == "" {
		return refuse("is outside the granted paths")
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p.real, root), "/")
	for _, part := range strings.Split(rel, "/") {
		if sandbox.SecretFileName(part) {
			return refuse("resolves to a secret-shaped file (.env, keys, credential stores), which Exec never reads")
		}
	}
	for _, d := range deny {
		if within(p.real, d) {
			return refuse("is hidden by the policy (fs_deny)")
		}
	}
	return nil
}

// recheckPaths re-resolves the path arguments just before the run and
// refuses when one resolves differently than when it was checked (a
// symlink swapped in since).
func (c *call) recheckPaths(plan *wire.ExecPlan) error {
	if plan == nil {
		return nil
	}
	paths := c.resolvedPaths()
	for _, pa := range plan.PathArgs {
		v, _ := pathValue(c.in.argv[pa.Index], pa.Value)
		now := resolveArgPath(c.in.cwd, v)
		var then argPath
		if pa.Index < len(paths) && paths[pa.Index].raw == v {
			then = paths[pa.Index]
		} else {
			continue // resolved at Enforce only: compared there
		}
		if now.real != then.real || (now.err == nil) != (then.err == nil) {
			return wire.Errorf(wire.CodeSandboxViolation, "argv[%d] changed after it was checked (a symlink was swapped in or a file moved)", pa.Index)
		}
	}
	return nil
}

// runArgv is the argv that runs: argv[0] as its real path, the caller's
// arguments, and the plan's forced arguments inserted, with HomeToken
// replaced by home in them only (the caller's arguments are never
// rewritten).
func (c *call) runArgv(plan *wire.ExecPlan, home string) []string {
	argv := slices.Clone(c.in.argv)
	argv[0] = c.in.argv0
	if plan == nil || len(plan.Insert) == 0 {
		return argv
	}
	out := make([]string, 0, len(argv)+wire.MaxInsertArgs)
	next := 0
	for i := 0; i <= len(argv); i++ {
		for next < len(plan.Insert) && plan.Insert[next].At == i {
			for _, a := range plan.Insert[next].Args {
				out = append(out, strings.ReplaceAll(a, HomeToken, home))
			}
			next++
		}
		if i < len(argv) {
			out = append(out, argv[i])
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
