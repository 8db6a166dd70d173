package policies

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/portcullis/portcullis/wire"
)

// DefaultQuery is the rule the policy contract names (CONTRACT.md §5).
const DefaultQuery = "data.portcullis.decision"

// ErrNoPolicy is returned by Decide before any bundle was loaded, so the
// gateway can fail closed with a clear cause.
var ErrNoPolicy = errors.New("no policy loaded")

// Options configure an Engine. The zero value is usable.
type Options struct {
	// Logger receives load events; nil discards them.
	Logger *slog.Logger
	// Now is the clock for LoadedAt and for time.now_ns when the input has
	// no time; nil means time.Now. Tests inject a fixed clock.
	Now func() time.Time
	// Query is the decision to evaluate; empty means DefaultQuery.
	Query string
	// MemoSize is how many of the policy's answers each loaded bundle
	// remembers (memo.go): 0 means DefaultMemoSize, negative none.
	MemoSize int
}

// Info describes the live policy, for receipts, /readyz and `bundle inspect`.
type Info struct {
	// Revision is the manifest revision, else "sha256:" + 12 hex of Digest.
	Revision string `json:"revision"`
	// Digest is the SHA-256 hex over the bundle's sorted (path, content).
	Digest string `json:"digest"`
	// Source says where the bundle came from (a path, a URL, "shipped").
	Source   string    `json:"source"`
	LoadedAt time.Time `json:"loaded_at"`
	// Files are the bundle's file paths, sorted.
	Files []string `json:"files"`
	// Signature describes the bundle's verified signature; nil when the
	// bundle was loaded without a verification key.
	Signature *Signature `json:"signature,omitempty"`
}

// Signature is who signed a bundle whose signature was verified at load.
type Signature struct {
	KeyID     string `json:"key_id"`
	Algorithm string `json:"algorithm"`
}

// LoadOptions are the checks a bundle must pass before it goes live. The
// zero value compiles only, as Load always did.
type LoadOptions struct {
	// Verification, when set, requires a .signatures.json whose JWT is
	// signed by its key and whose file digests match every file: unsigned,
	// tampered or wrongly signed bundles are refused (StageSignature).
	Verification *bundle.VerificationConfig
	// KeyID, when set with Verification, is the key id the signature must
	// name (OPA itself verifies with the configured key whatever the
	// signature names).
	KeyID string
	// RunTests runs the bundle's own test_ rules; any failure refuses it
	// (StageTests), so a bundle that breaks its own tests never goes live.
	RunTests bool
	// Schemas type-checks rules against JSON Schemas of the input (see
	// InputSchemas): a rule reading a field that cannot exist is a load
	// error (StageCompile).
	Schemas *ast.SchemaSet
}

// Load stages name where a candidate bundle was refused, for metrics and logs.
const (
	StageRead      = "read"
	StageSignature = "signature"
	StageCompile   = "compile"
	StageTests     = "tests"
)

// LoadError is why a candidate bundle was refused; Stage is one of the
// Stage constants.
type LoadError struct {
	Stage string
	Err   error
}

func (e *LoadError) Error() string { return e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// StageOf returns the stage of a load error, "" for other errors.
func StageOf(err error) string {
	var le *LoadError
	if errors.As(err, &le) {
		return le.Stage
	}
	return ""
}

// compiled is one loaded bundle: swapped as a whole so an evaluation never
// mixes the query of one revision with the info of another.
type compiled struct {
	query rego.PreparedEvalQuery
	info  Info
	index *index // nil: nothing precomputed
	memo  *memo  // nil: answers are not remembered
}

// Engine evaluates the live policy bundle. It is safe for concurrent use;
// Load swaps bundles atomically and in-flight evaluations finish on the
// bundle they started with.
type Engine struct {
	log      *slog.Logger
	now      func() time.Time
	query    string
	memoSize int
	live     atomic.Pointer[compiled]
}

// NewEngine returns an engine with no policy: Decide fails until Load succeeds.
func NewEngine(opts Options) *Engine {
	e := &Engine{log: opts.Logger, now: opts.Now, query: opts.Query, memoSize: opts.MemoSize}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.query == "" {
		e.query = DefaultQuery
	}
	return e
}

// Load reads fsys as an OPA bundle directory, compiles it, prepares the
// decision query once and makes it live. On any error the previous policy
// stays live and the error says why the candidate was refused.
func (e *Engine) Load(ctx context.Context, fsys fs.FS, source string) (Info, error) {
	return e.LoadWith(ctx, fsys, source, LoadOptions{})
}

// LoadWith is Load with the checks of opts: the candidate is read, its
// signature verified, compiled and tested before the atomic swap, and any
// failure leaves the previous policy live. Errors are *LoadError.
func (e *Engine) LoadWith(ctx context.Context, fsys fs.FS, source string, opts LoadOptions) (Info, error) {
	c, err := e.compile(ctx, fsys, source, opts)
	if err != nil {
		e.log.ErrorContext(ctx, "policy load failed, previous policy stays live", "source", source, "err", err)
		return Info{}, err
	}
	old := e.live.Swap(c)
	attrs := []any{"source", source, "revision", c.info.Revision, "digest", c.info.Digest, "files", len(c.info.Files)}
	if old != nil {
		attrs = append(attrs, "previous_revision", old.info.Revision)
	}
	e.log.InfoContext(ctx, "policy loaded", attrs...)
	return c.info, nil
}

// LoadDir loads the bundle directory dir; see Load.
func (e *Engine) LoadDir(ctx context.Context, dir string) (Info, error) {
	fsys, err := dirFS(dir)
	if err != nil {
		return Info{}, err
	}
	return e.Load(ctx, fsys, dir)
}

// compile builds a prepared query from fsys without touching the live policy.
func (e *Engine) compile(ctx context.Context, fsys fs.FS, source string, opts LoadOptions) (*compiled, error) {
	fail := func(stage string, err error) (*compiled, error) {
		return nil, &LoadError{Stage: stage, Err: err}
	}
	if fsys == nil {
		return fail(StageRead, errors.New("load policy: nil file system"))
	}
	files, err := readBundleFiles(fsys)
	if err != nil {
		return fail(StageRead, fmt.Errorf("load policy from %s: %w", source, err))
	}
	var sig *Signature
	if opts.Verification != nil {
		// Verify first and separately, so that a bad signature is reported
		// as such and not as whatever the unverified content would do.
		vb, err := readBundle(files, opts.Verification)
		if err != nil {
			return fail(StageSignature, fmt.Errorf("verify policy bundle from %s: %w", source, err))
		}
		if sig, err = signatureOf(vb.Signatures); err != nil {
			return fail(StageSignature, fmt.Errorf("verify policy bundle from %s: %w", source, err))
		}
		if opts.KeyID != "" && sig.KeyID != opts.KeyID {
			return fail(StageSignature, fmt.Errorf("verify policy bundle from %s: signed with key id %q, want %q", source, sig.KeyID, opts.KeyID))
		}
	}
	b, err := parseBundle(withoutSignatures(files))
	if err != nil {
		return fail(StageCompile, fmt.Errorf("load policy from %s: %w", source, err))
	}
	if opts.RunTests {
		results, err := runTests(ctx, &b, false)
		if err != nil {
			return fail(StageTests, fmt.Errorf("test policy from %s: %w", source, err))
		}
		if failed := failedTests(results.Tests); len(failed) > 0 {
			return fail(StageTests, fmt.Errorf("policy from %s fails %d of its own tests: %s", source, len(failed), strings.Join(failed, "; ")))
		}
	}
	// A fresh store per bundle: the prepared query reads only its own data,
	// so swapping the pointer swaps policy and data together.
	store := inmem.NewWithOpts(inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return nil, fmt.Errorf("compile policy from %s: open store: %w", source, err)
	}
	// Our own compiler (configured as rego.New would) so that the index
	// package can be evaluated from the compiled bundle below.
	compiler := ast.NewCompiler().
		WithUseTypeCheckAnnotations(true).
		WithDefaultRegoVersion(ast.RegoV1).
		WithCapabilities(Capabilities())
	if opts.Schemas != nil {
		compiler = compiler.WithSchemas(opts.Schemas)
	}
	pq, err := rego.New(
		rego.Query(e.query),
		rego.Compiler(compiler),
		rego.Store(store),
		rego.Transaction(txn),
		rego.StoreReadAST(true),
		rego.ParsedBundle("policy", &b),
		rego.SetRegoVersion(ast.RegoV1),
		rego.Capabilities(Capabilities()),
	).PrepareForEval(ctx)
	if err != nil {
		store.Abort(ctx, txn)
		return fail(StageCompile, fmt.Errorf("compile policy from %s: %w", source, err))
	}
	if err := store.Commit(ctx, txn); err != nil {
		return fail(StageCompile, fmt.Errorf("compile policy from %s: commit store: %w", source, err))
	}
	ix, err := buildIndex(ctx, compiler, store)
	if err != nil {
		return fail(StageCompile, fmt.Errorf("compile policy from %s: %w", source, err))
	}
	digest := digestFiles(withoutSignatures(files))
	info := Info{
		Revision:  b.Manifest.Revision,
		Digest:    digest,
		Source:    source,
		LoadedAt:  e.now().UTC(),
		Files:     make([]string, len(files)),
		Signature: sig,
	}
	if info.Revision == "" {
		info.Revision = "sha256:" + digest[:12]
	}
	for i, f := range files {
		info.Files[i] = f.Path
	}
	return &compiled{query: pq, info: info, index: ix, memo: newMemo(compiler, e.memoSize)}, nil
}

// Info returns the live policy's description; false when none is loaded.
func (e *Engine) Info() (Info, bool) {
	c := e.live.Load()
	if c == nil {
		return Info{}, false
	}
	info := c.info
	info.Files = append([]string(nil), c.info.Files...)
	if c.info.Signature != nil {
		sig := *c.info.Signature
		info.Signature = &sig
	}
	return info, true
}

// Ready reports whether a policy is live, for /readyz.
func (e *Engine) Ready() bool { return e.live.Load() != nil }

// Decide evaluates the live policy for in. A deny is a Decision with Allow
// false, never an error; an error means the policy could not be evaluated
// and the gateway must refuse the call (500 internal).
func (e *Engine) Decide(ctx context.Context, in wire.PolicyInput) (wire.Decision, error) {
	c := e.live.Load()
	if c == nil {
		return wire.Decision{}, ErrNoPolicy
	}
	if in.Time.IsZero() {
		in.Time = e.now()
	}
	res, err := c.eval(ctx, &in)
	if err != nil {
		return wire.Decision{}, err
	}
	var d wire.Decision
	switch {
	case res.results == 0:
		d = deny("policy returned no decision")
	case res.results > 1:
		d = deny("policy returned more than one decision")
	default:
		d, err = decisionOf(res.value)
		if err != nil {
			return wire.Decision{}, fmt.Errorf("evaluate policy %s: %w", c.info.Revision, err)
		}
	}
	d.PolicyRevision = c.info.Revision
	return d, nil
}

// keepAST leaves results as AST terms: Decide reads a well-formed decision
// from the AST directly (decisionFromAST) and converts only the rest.
func keepAST(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

func decisionOf(v any) (wire.Decision, error) {
	t, ok := v.(*ast.Term)
	if !ok {
		return parseDecision(v), nil
	}
	if d, ok := decisionFromAST(t.Value); ok {
		return d, nil
	}
	x, err := ast.JSON(t.Value)
	if err != nil {
		return wire.Decision{}, err
	}
	return parseDecision(x), nil
}

// DeniedBuiltins are the Rego built-ins a policy may not call. A decision
// is a pure function of its input and the bundle's data: it runs for dry
// runs and tool listings, which must leave no trace outside the gateway
// (http.send and net.lookup_ip_addr would send packets an agent chooses),
// and replays must reproduce it. opa.runtime would expose the gateway's
// configuration and environment to rules that could echo it in reasons.
var DeniedBuiltins = []string{"http.send", "net.lookup_ip_addr", "opa.runtime"}

// Capabilities are OPA's capabilities for this version without
// DeniedBuiltins: a bundle that calls one fails to compile, naming it.
func Capabilities() *ast.Capabilities {
	caps := ast.CapabilitiesForThisVersion()
	kept := caps.Builtins[:0:0]
	for _, b := range caps.Builtins {
		denied := false
		for _, d := range DeniedBuiltins {
			if b.Name == d {
				denied = true
				break
			}
		}
		if !denied {
			kept = append(kept, b)
		}
	}
	caps.Builtins = kept
	caps.AllowNet = []string{} // and no host for any built-in that still could
	return caps
}
