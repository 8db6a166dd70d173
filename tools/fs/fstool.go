// Package fstool holds the file tools fs.list, fs.read, fs.search, fs.write
// and fs.apply_patch. Paths are absolute or @alias/rel; the policy's fs
// grants say which directories a call may touch and how.
//
// Checking a path and opening it are one step. Enforce opens the grant's
// directory, checks it is the directory resolved, and walks the path below
// it one component at a time (openat2 with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, or openat with O_NOFOLLOW
// where openat2 is missing), never following a symlink; every directory it
// opens is compared by identity with the denied paths and, for writes, the
// read-only grants' roots. Run then works on the descriptors Enforce kept,
// so a symlink swapped in, a directory renamed in or a file replaced after
// the checks cannot change what is touched. Symlinks below a grant's
// directory are never followed (sandbox_violation); symlinks above it, the
// operator's (/home -> /data/home), are resolved once, before the policy,
// which decides on the real path.
//
// It lives in tools/fs; the package is named fstool so that it does not
// shadow io/fs, which it uses.
package fstool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/internal/inputschema"
	"github.com/portcullis/portcullis/tools/internal/strictjson"
	"github.com/portcullis/portcullis/wire"
)

// Backend is the name evidence records for calls run by these tools.
const Backend = "fs"

// Wire names of the tools.
const (
	NameList   = "fs.list"
	NameRead   = "fs.read"
	NameSearch = "fs.search"
	NameWrite  = "fs.write"
	NamePatch  = "fs.apply_patch"
)

// Limits taken from the decision (wire.Limits). Zero means the default;
// larger values are clamped to the ceiling so a policy typo cannot lift a
// bound.
//
//   - limits.max_output_bytes: most bytes of file content fs.read returns
//     (default DefaultReadBytes); longer reads are truncated, not refused.
//   - limits.fsize_bytes: largest file fs.read will hash and scan
//     (default DefaultReadFileBytes, else read_limit), and largest content
//     fs.write / fs.apply_patch will write (default DefaultWriteBytes, else
//     write_limit).
//   - limits.timeout_s: wall-time budget of one fs.search (default
//     DefaultSearchTime), after which it returns what it found, truncated;
//     and of one fs.read or fs.list (default DefaultReadTime), after which
//     the call ends with timeout even if the file system never answers.
const (
	DefaultReadBytes     = 50 << 10
	MaxReadBytes         = 4 << 20
	DefaultReadFileBytes = 64 << 20
	DefaultWriteBytes    = 100 << 10
	MaxFileBytes         = 16 << 30
	DefaultSearchTime    = 5 * time.Second
	DefaultReadTime      = 30 * time.Second
	MaxSearchTime        = 60 * time.Second
)

// SearchBounds bound the work of one fs.search. Zero fields take defaults.
type SearchBounds struct {
	MaxFiles     int   // files opened; default 20000
	MaxBytes     int64 // bytes read over all files; default 64 MiB
	MaxFileBytes int64 // larger files are skipped; default 2 MiB
}

func (b SearchBounds) withDefaults() SearchBounds {
	if b.MaxFiles <= 0 {
		b.MaxFiles = 20000
	}
	if b.MaxBytes <= 0 {
		b.MaxBytes = 64 << 20
	}
	if b.MaxFileBytes <= 0 {
		b.MaxFileBytes = 2 << 20
	}
	return b
}

// Options configure the tools.
type Options struct {
	// Logger receives internal failures (never file contents).
	// Default: slog.Default().
	Logger *slog.Logger
	// Search bounds fs.search beyond what the policy's limits say.
	Search SearchBounds
	// Stop, when closed, ends every read-only call in flight at once with
	// timeout (serve closes it on SIGTERM): they change nothing, so a
	// shutdown never waits on a file system that does not answer. Nil:
	// never.
	Stop <-chan struct{}
}

// shared is what the five tools have in common.
type shared struct {
	stop    <-chan struct{}
	log     *slog.Logger
	search  SearchBounds
	locks   *pathLocks
	secrets *homeSecrets
	cache   *resolveCache // grants' and fs_deny's resolutions
}

// Tools returns fs.list, fs.read, fs.search, fs.write and fs.apply_patch.
// They share one write lock table so that ifMatchSha256 preconditions hold
// between concurrent calls through this gateway.
func Tools(opts Options) []tools.Tool {
	s := &shared{stop: opts.Stop, log: opts.Logger, search: opts.Search.withDefaults(), locks: newPathLocks(), secrets: newHomeSecrets(), cache: newResolveCache()}
	if s.log == nil {
		s.log = slog.Default()
	}
	return []tools.Tool{
		&tool{s: s, name: NameList, desc: listDescription, schema: listInput, prepare: prepareList, want: wantDir},
		&tool{s: s, name: NameRead, desc: readDescription, schema: readInput, prepare: prepareRead, want: wantFile},
		&tool{s: s, name: NameSearch, desc: searchDescription, schema: searchInput, prepare: prepareSearch, want: wantFileOrDir},
		&tool{s: s, name: NameWrite, desc: writeDescription, schema: writeInput, prepare: prepareWrite, write: true, want: wantParent},
		&tool{s: s, name: NamePatch, desc: patchDescription, schema: patchInput, prepare: preparePatch, write: true, want: wantParent},
	}
}

// operation is one tool's prepared request.
type operation interface {
	// paths are the path arguments, in input order.
	paths() []*pathRef
	// run does the work on the enforced targets (same order as paths).
	run(ctx context.Context, c *call) (any, error)
}

// argsRedactor is implemented by operations whose input holds file
// contents: receipts keep sizes and hashes, never contents.
type argsRedactor interface{ redactArgs(args map[string]any) }

// limitChecker is implemented by operations with limits known before Run.
type limitChecker interface{ checkLimits(l effectiveLimits) error }

// resolvedExtra adds operation facts to input.resolved.
type resolvedExtra interface{ resolvedExtra(m map[string]any) }

type tool struct {
	s       *shared
	name    string
	desc    string
	schema  *inputschema.Schema
	write   bool
	want    kind // what Enforce opens at the end of each path
	prepare func(obj strictjson.Object) (operation, error)
}

var _ tools.Tool = (*tool)(nil)

func (t *tool) Name() string                { return t.name }
func (t *tool) Description() string         { return t.desc }
func (t *tool) Parameters() json.RawMessage { return t.schema.JSON() }

// Annotations: list, read and search change nothing; write replaces a
// file (the same content twice is one change), apply_patch edits one.
func (t *tool) Annotations() map[string]any {
	return tools.Hints(!t.write, t.write, t.name == NameWrite, false)
}

// The tools' schemas, advertised and enforced (inputschema).
var (
	listInput   = inputschema.MustCompile(NameList, listSchema)
	readInput   = inputschema.MustCompile(NameRead, readSchema)
	searchInput = inputschema.MustCompile(NameSearch, searchSchema)
	writeInput  = inputschema.MustCompile(NameWrite, writeSchema)
	patchInput  = inputschema.MustCompile(NamePatch, patchSchema)
)

// Prepare checks the input strictly and normalizes its paths; absolute
// paths are resolved to real paths so the policy matches what will really
// be touched.
func (t *tool) Prepare(ctx context.Context, input json.RawMessage) (tools.Call, error) {
	obj, err := t.schema.Decode(input)
	if err != nil {
		return nil, err
	}
	op, err := t.prepare(obj)
	if err != nil {
		return nil, err
	}
	args, err := strictjson.Args(input)
	if err != nil {
		return nil, err
	}
	if r, ok := op.(argsRedactor); ok {
		r.redactArgs(args)
	}
	for _, p := range op.paths() {
		if p.abs != "" {
			p.resolveAbs()
		}
	}
	return &call{tool: t, op: op, args: args}, nil
}

// call is one prepared request.
type call struct {
	tool *tool
	op   operation
	args map[string]any

	// Set by Enforce.
	enforced bool
	targets  []target
	limits   effectiveLimits
	deny     denyList
	fds      *fdSet  // the descriptors Enforce opened, for Run
	open     *opener // what Run checks directories it creates against
}

var _ tools.Call = (*call)(nil)

// Args is the caller's input as decoded, with file contents replaced by
// {"bytes": N, "sha256": "..."}: it is what policy input.args and the
// receipt hold.
func (c *call) Args() map[string]any { return c.args }

// Resolved holds, for the first path argument: path (real path for absolute
// paths; "" for alias paths, which are mapped only after the policy),
// alias, rel (below the alias), name (base name), and for absolute paths
// exists, type (file|dir|other) and size; "paths" lists the same facts for
// every path argument; "write" says whether the tool writes.
func (c *call) Resolved() map[string]any {
	ps := c.op.paths()
	m := map[string]any{}
	list := make([]any, 0, len(ps))
	for i, p := range ps {
		f := p.resolvedFacts()
		if i == 0 {
			for k, v := range f {
				m[k] = v
			}
		}
		list = append(list, f)
	}
	m["paths"] = list
	m["write"] = c.tool.write
	if x, ok := c.op.(resolvedExtra); ok {
		x.resolvedExtra(m)
	}
	return m
}

// effectiveLimits are the decision's limits as these tools apply them.
type effectiveLimits struct {
	readBytes     int
	readFileBytes int64
	writeBytes    int64
	searchTime    time.Duration
	readTime      time.Duration
}

func limitsFrom(p wire.Limits) (effectiveLimits, error) {
	if p.TimeoutS < 0 || p.FsizeBytes < 0 || p.MaxOutputBytes < 0 {
		return effectiveLimits{}, wire.Errorf(wire.CodeInternal, "the policy returned a negative limit; limits must be zero (default) or positive")
	}
	l := effectiveLimits{readBytes: DefaultReadBytes, readFileBytes: DefaultReadFileBytes, writeBytes: DefaultWriteBytes, searchTime: DefaultSearchTime, readTime: DefaultReadTime}
	if p.MaxOutputBytes > 0 {
		l.readBytes = min(p.MaxOutputBytes, MaxReadBytes)
	}
	if p.FsizeBytes > 0 {
		l.readFileBytes = min(p.FsizeBytes, MaxFileBytes)
		l.writeBytes = min(p.FsizeBytes, MaxFileBytes)
	}
	if p.TimeoutS > 0 {
		l.searchTime = min(time.Duration(p.TimeoutS)*time.Second, MaxSearchTime)
		l.readTime = l.searchTime
	}
	return l, nil
}

// Enforce maps every path to the grant it falls in (see enforcePath for the
// error codes), opens it (open.go) and returns the scope: the grants the
// call touches, network off, the limits applied. The descriptors it opens
// are Run's; a call that will not run is Released (or collected).
func (c *call) Enforce(ctx context.Context, d wire.Decision) (wire.Scope, error) {
	if c.enforced {
		return wire.Scope{}, wire.Errorf(wire.CodeInternal, "%s was enforced twice", c.tool.name)
	}
	l, err := limitsFrom(d.Limits)
	if err != nil {
		return wire.Scope{}, err
	}
	sh := c.tool.s
	grants := resolveGrants(d.FSGrants, sh.cache)
	deny := newDenyList(d.FSDeny, sh.secrets.get(), sh.cache)
	targets := make([]target, 0, len(c.op.paths()))
	used := []wire.FSGrant{}
	for _, p := range c.op.paths() {
		t, err := enforcePath(p, grants, &deny, c.tool.write)
		if err != nil {
			return wire.Scope{}, err
		}
		targets = append(targets, t)
		g := wire.FSGrant{Path: t.grant.real, Mode: t.grant.Mode, Alias: t.grant.Alias, AllowAutorun: t.grant.AllowAutorun}
		if !slices.Contains(used, g) {
			used = append(used, g)
		}
	}
	if lc, ok := c.op.(limitChecker); ok {
		if err := lc.checkLimits(l); err != nil {
			return wire.Scope{}, err
		}
	}
	fds := &fdSet{}
	o := &opener{deny: &deny, write: c.tool.write, fds: fds, cache: sh.cache}
	if c.tool.write {
		for _, g := range grants {
			if g.Mode == wire.ModeRead {
				o.ro = append(o.ro, watched{id: g.id, path: g.real, why: "a read-only grant"})
			}
		}
	}
	want := c.tool.want
	for i := range targets {
		if err := o.openTarget(&targets[i], want); err != nil {
			fds.close()
			return wire.Scope{}, err
		}
	}
	// A call dropped after Enforce (a dry run, a decision that could not be
	// recorded) without Release has its descriptors closed when collected.
	runtime.AddCleanup(c, func(s *fdSet) { s.close() }, fds)
	c.targets, c.limits, c.enforced, c.deny, c.fds, c.open = targets, l, true, deny, fds, o
	o.deny = &c.deny
	scope := wire.Scope{
		FSGrants: used,
		Network:  wire.Network{Posture: wire.PostureOff, Allow: []string{}},
		EnvNames: []string{},
		Limits: wire.Limits{
			MaxOutputBytes: l.readBytes,
			FsizeBytes:     l.writeBytes,
		},
		Backend: Backend,
		FSDeny:  deny.paths,
	}
	switch c.tool.name {
	case NameRead:
		scope.Limits.FsizeBytes = l.readFileBytes
		scope.Limits.TimeoutS = int(l.readTime / time.Second)
	case NameList:
		scope.Limits.TimeoutS = int(l.readTime / time.Second)
	case NameSearch:
		scope.Limits.TimeoutS = int(l.searchTime / time.Second)
	}
	return scope, nil
}

// Release closes what Enforce opened, for a call that will not be Run.
func (c *call) Release() {
	if c.fds != nil {
		c.fds.close()
	}
}

// Run performs the operation. Every failure is a ToolOutput with a contract
// error code: status failed for refusals the caller can fix, error for the
// gateway's own faults.
func (c *call) Run(ctx context.Context, scope wire.Scope) tools.Result {
	start := time.Now()
	var data any
	var err error
	switch {
	case !c.enforced:
		err = wire.Errorf(wire.CodeInternal, "%s was run before its scope was enforced", c.tool.name)
	case c.fds.closedAlready():
		err = wire.Errorf(wire.CodeInternal, "%s was run twice, or after Release", c.tool.name)
	case c.tool.write:
		// Writes are not abandoned part way: the commit is all or nothing,
		// and the answer must say whether it happened.
		defer c.fds.close()
		data, err = c.op.run(ctx, c)
	default:
		data, err = c.runBounded(ctx)
	}
	ms := time.Since(start).Milliseconds()
	res := tools.Result{
		Output:  wire.ToolOutput{Metadata: map[string]any{"backend": Backend}},
		Backend: Backend,
	}
	res.SetDuration(ms)
	if err != nil {
		var we *wire.Error
		if !errors.As(err, &we) {
			// The cause travels wrapped; the pipeline logs it where the
			// answer leaves the gateway.
			we = wire.Wrap(wire.CodeInternal, "fs: "+c.tool.name, err, "%s failed inside the gateway; nothing was changed", c.tool.name)
		}
		if we.Details == nil {
			we.Details = map[string]any{}
		}
		res.Output.Error = we
		res.Status = wire.StatusFailed
		switch we.Code {
		case wire.CodeInternal:
			res.Status = wire.StatusError
		case wire.CodeTimeout:
			res.Status = wire.StatusTimedOut
		}
		return res
	}
	b, merr := json.Marshal(data)
	if merr != nil {
		res.Output.Error = wire.Errorf(wire.CodeInternal, "encoding the output: %v", merr)
		res.Status = wire.StatusError
		return res
	}
	sum := sha256.Sum256(b)
	res.Output.Success = true
	res.Output.Data = wire.CompactJSON(b)
	res.Status = wire.StatusSucceeded
	res.OutputSHA256 = hex.EncodeToString(sum[:])
	return res
}

// runBounded runs a read-only operation within its deadline (limits
// timeout_s, and the call's context): should the file system never answer
// (a hung network mount), the call ends with timeout and the operation,
// which changes nothing, finishes on its own and closes its descriptors.
// The gateway, its handler and its shutdown never wait on it.
func (c *call) runBounded(ctx context.Context) (any, error) {
	limit := c.limits.readTime
	if c.tool.name == NameSearch {
		limit = c.limits.searchTime + time.Second // search stops itself at its budget
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	type result struct {
		data any
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		defer c.fds.close()
		data, err := c.op.run(ctx, c)
		done <- result{data, err}
	}()
	var why string
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		why = fmt.Sprintf("did not finish within %s (limits.timeout_s), or the call was cancelled: %v", limit, context.Cause(ctx))
	case <-c.tool.s.stop:
		why = "was abandoned: the gateway is shutting down"
	}
	select {
	case r := <-done: // finished meanwhile
		return r.data, r.err
	default:
	}
	return nil, wire.Errorf(wire.CodeTimeout, "%s %s", c.tool.name, why)
}

// pathLocks serialize writers of one real path inside this gateway, so a
// precondition checked under the lock still holds at the rename. Writers
// outside the gateway are not covered; the rename is atomic regardless.
type pathLocks struct {
	mu    sync.Mutex
	locks map[string]*pathLock
}

type pathLock struct {
	mu   sync.Mutex
	refs int
}

func newPathLocks() *pathLocks { return &pathLocks{locks: map[string]*pathLock{}} }

// lock takes the locks of paths in sorted order (no deadlock between two
// multi-file patches) and returns the function releasing them.
func (l *pathLocks) lock(paths []string) func() {
	paths = slices.Clone(paths)
	slices.Sort(paths)
	paths = slices.Compact(paths)
	held := make([]*pathLock, 0, len(paths))
	for _, p := range paths {
		l.mu.Lock()
		pl := l.locks[p]
		if pl == nil {
			pl = &pathLock{}
			l.locks[p] = pl
		}
		pl.refs++
		l.mu.Unlock()
		pl.mu.Lock()
		held = append(held, pl)
	}
	return func() {
		for i, pl := range held {
			pl.mu.Unlock()
			l.mu.Lock()
			pl.refs--
			if pl.refs == 0 {
				delete(l.locks, paths[i])
			}
			l.mu.Unlock()
		}
	}
}

// hexSum formats a SHA-256.
func hexSum(b []byte) string { return hex.EncodeToString(b) }

// contentFacts is what receipts keep of a file body: size and hash.
func contentFacts(s string) map[string]any {
	sum := sha256.Sum256([]byte(s))
	return map[string]any{"bytes": len(s), "sha256": hex.EncodeToString(sum[:])}
}
