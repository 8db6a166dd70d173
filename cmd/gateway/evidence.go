package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/evidence/postgres"
	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/evidence/sqlite"
	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/readresult"
)

// devKeyName names the key `serve --dev` generates; it is also the origin
// line of its checkpoints.
const devKeyName = "portcullis.dev/evidence"

// devCheckpointDir is where `serve --dev` copies checkpoints and chain
// heads when evidence.checkpoint_dir is not set: data_dir/checkpoints.
// It is only a default for trying the gateway: anchors beside the
// database fall with it; production puts checkpoint_dir on another system.
const devCheckpointDir = "checkpoints"

func evidenceCmd() *cobra.Command {
	return group("evidence", "query, export, verify and retain evidence; legal holds",
		evidenceQueryCmd(), evidenceExportCmd(), evidenceVerifyCmd(), evidenceRetainCmd(), evidenceHoldCmd())
}

// signingKey reads the note signing key from evidence.signing_key, or with
// dev generates one under data_dir on first use (0600) and logs its
// verifier key. An empty key and no dev means checkpoints are off.
func signingKey(cfg config.Config, dev bool, log *slog.Logger) (string, error) {
	path := cfg.Evidence.SigningKey
	if path == "" {
		if !dev {
			return "", nil
		}
		path = filepath.Join(cfg.DataDir, "evidence-signing.key")
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			skey, _, err := note.GenerateKey(rand.Reader, devKeyName)
			if err != nil {
				return "", fmt.Errorf("generate evidence signing key: %w", err)
			}
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				return "", fmt.Errorf("evidence signing key: %w", err)
			}
			if err := os.WriteFile(path, []byte(skey+"\n"), 0o600); err != nil {
				return "", fmt.Errorf("write evidence signing key: %w", err)
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("evidence.signing_key: %w", err)
	}
	skey := strings.TrimSpace(string(b))
	vkey, err := evidence.VerifierKeyFromSigningKey(skey)
	if err != nil {
		return "", fmt.Errorf("evidence.signing_key %s: %w", path, err)
	}
	log.Info("evidence checkpoints signed", "key_file", path, "verifier_key", vkey)
	return skey, nil
}

// resultStore is where read_tool_result reads (data_dir/results), or nil
// when evidence.results_retention is 0. It does no I/O until used.
func resultStore(cfg config.Config, log *slog.Logger) *results.Store {
	if cfg.Evidence.ResultsRetention <= 0 {
		return nil
	}
	return results.New(results.Options{Dir: filepath.Join(cfg.DataDir, "results"),
		Retention: cfg.Evidence.ResultsRetention.Std(), MaxBytes: cfg.Evidence.ResultsMaxBytes, Logger: log})
}

// keeperOf is the result store read_tool_result (among ts) reads, for
// the pipeline to keep results in; nil when the tool is not offered.
func keeperOf(ts []tools.Tool) gateway.ResultKeeper {
	if rs := readresult.Results(ts); rs != nil {
		return rs
	}
	return nil
}

// evidenceServices are serve's evidence side besides the writer: the
// checkpointer, the chain head copies, and the late outcomes with their
// spool.
type evidenceServices struct {
	// auditor serves proofs and stats; nil when checkpoints are off (the
	// gateway then answers those routes 503 evidence_unavailable).
	auditor gateway.EvidenceAuditor
	late    *evidence.LateOutcomes
	st      *stack
	stopped func()
}

// evidenceTimeout bounds one call's wait for an evidence write: a call's
// write may queue behind one commit that times out.
func evidenceTimeout(cfg config.Config) time.Duration {
	return 2*cfg.Evidence.CommitTimeout.Std() + time.Second
}

// lateSpoolPath is the late outcome spool of an instance, under data_dir:
// one per instance id, so gateways sharing a data_dir never share one.
func lateSpoolPath(cfg config.Config, instanceID string) string {
	var b strings.Builder
	for _, r := range instanceID {
		if r < 128 && (r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return filepath.Join(cfg.DataDir, "late-outcomes-"+b.String()+"-"+evidence.ArgsDigest([]byte(instanceID))[:8]+".spool")
}

// startEvidenceServices opens the late outcome spool and starts the
// checkpointer: every evidence.checkpoint_interval, if this process wins
// the election, new events become leaves of the Merkle tree and a signed
// checkpoint is stored (and copied to evidence.checkpoint_dir, with this
// process's chain head about once a second). stop ends them: call it after
// the writer closed, so the last checkpoint pass and head copy cover
// everything written.
func startEvidenceServices(ctx context.Context, cfg config.Config, dev bool, st *stack, log *slog.Logger) (*evidenceServices, error) {
	late, err := evidence.OpenLateOutcomes(evidence.LateOptions{
		Writer: st.writer, Receipts: st.store, Healthy: st.writer.Healthy, WriteTimeout: evidenceTimeout(cfg),
		Spool: lateSpoolPath(cfg, st.instanceID), Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("late outcome spool (data_dir must be writable and local): %w", err)
	}
	ev := &evidenceServices{late: late, st: st, stopped: func() {}}
	skey, err := signingKey(cfg, dev, log)
	if err != nil {
		_ = late.Close()
		return nil, err
	}
	if skey == "" {
		log.Warn("evidence.signing_key is not set: no signed checkpoints; the hash chains alone cannot show a rewrite of the whole table")
		return ev, nil
	}
	l, ok := st.store.(evidence.Ledger)
	if !ok {
		_ = late.Close()
		return nil, fmt.Errorf("evidence store %T cannot keep checkpoints", st.store)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		_ = late.Close()
		return nil, fmt.Errorf("evidence.signing_key: %w", err)
	}
	vkey, err := evidence.VerifierKeyFromSigningKey(skey)
	if err != nil {
		_ = late.Close()
		return nil, err
	}
	dir := cfg.Evidence.CheckpointDir
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{
		Signer: signer, Interval: time.Duration(cfg.Evidence.CheckpointInterval), Dir: dir, Logger: log,
	})
	if err != nil {
		_ = late.Close()
		return nil, err
	}
	if st.evMetrics != nil {
		st.evMetrics.checker = c
	}
	var heads *evidence.HeadRecorder
	if dir != "" {
		if heads, err = evidence.NewHeadRecorder(st.writer, evidence.HeadRecorderOptions{Signer: signer, Dir: dir, Logger: log}); err != nil {
			_ = late.Close()
			return nil, err
		}
		log.Info("evidence anchors copied outside the database", "checkpoint_dir", dir)
	} else {
		log.Warn("evidence.checkpoint_dir is not set: `evidence verify` can check the store only for internal consistency (a rollback to an earlier copy would not show)")
	}
	// Not ctx: the checkpointer's last pass must come after the writer
	// closed, which is after ctx ends.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(cctx) })
	if heads != nil {
		wg.Go(func() { heads.Run(cctx) })
	}
	ev.auditor = evidence.NewAuditor(l, vkey)
	ev.stopped = func() {
		cancel()
		wg.Wait()
		if heads != nil {
			if err := heads.Record(); err != nil {
				log.Error("evidence: final chain head copy", "error", err.Error())
			}
		}
	}
	return ev, nil
}

// recover runs before serving: outcomes a previous run spooled are
// recorded, then this instance's calls still pending are marked
// interrupted.
func (ev *evidenceServices) recover(ctx context.Context, log *slog.Logger) error {
	recorded, interrupted, err := evidence.RecoverStart(ctx, ev.st.store, ev.st.writer, ev.late, ev.st.instanceID)
	if recorded > 0 {
		log.Warn("outcomes a previous run could not record were recorded from the spool", "count", recorded, "instance_id", ev.st.instanceID)
	}
	if err != nil {
		return fmt.Errorf("marking interrupted calls: %w", err)
	}
	if interrupted > 0 {
		log.Warn("calls left pending by a previous run marked interrupted", "count", interrupted, "instance_id", ev.st.instanceID)
	}
	return nil
}

// stop ends the checkpointer (after a last pass) and the head copies, and
// closes the spool (what it still holds is recorded at the next start).
func (ev *evidenceServices) stop() {
	ev.stopped()
	_ = ev.late.Close()
}

// Exit codes of `gateway evidence verify`, so a scheduler can tell them
// apart: 0 verified; 1 the evidence was changed, deleted or is missing;
// 2 verification could not run (bad flags or config, no key, store
// unreachable, schema not this binary's); 3 verified, but nothing kept
// outside the database anchored the result and --require-anchor was given.
const (
	verifyExitFailed     = 1
	verifyExitError      = 2
	verifyExitUnanchored = 3
)

// exitError carries a command's exit code (main reads ExitCode).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// verifyOutput is the report `evidence verify --json` prints: the
// evidence.Report with the verdict and where store and anchors came from.
type verifyOutput struct {
	// Verdict is "ok" (anchored), "ok_unanchored" (internal consistency
	// only), "fail" (problems, or no store) or "error" (could not verify).
	Verdict string `json:"verdict"`
	*evidence.Report
	Store      string   `json:"store"`
	AnchorDirs []string `json:"anchor_dirs"`
	Warnings   []string `json:"warnings"`
	Error      string   `json:"error,omitempty"`
}

// cmdEvidenceVerify is `gateway evidence verify`. It opens the store
// read-only (it never creates, migrates or writes one), refuses a missing
// or empty store, checks it against the checkpoint copies and chain heads
// kept outside the database, and says plainly when none anchored the
// result.
func evidenceVerifyCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("verify [--config FILE] [--key K] [--checkpoint F]... [--checkpoints DIR]...",
		"check the chains, the tree and the checkpoints", noArgs)
	key := fs.String("key", "", "verifier key (name+hash+key) or a file holding it; default: derived from evidence.signing_key")
	var external, dirs []string
	fs.Func("checkpoint", "a checkpoint kept outside the database (file); repeatable", func(s string) error {
		external = append(external, s)
		return nil
	})
	fs.Func("checkpoints", "a directory of checkpoint copies and chain heads (evidence.checkpoint_dir); repeatable; default: evidence.checkpoint_dir, else data_dir/checkpoints when it exists", func(s string) error {
		dirs = append(dirs, s)
		return nil
	})
	requireAnchor := fs.Bool("require-anchor", false, "exit 3 unless something kept outside the database anchored the result")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		out := verifyOutput{Verdict: "error", AnchorDirs: []string{}, Warnings: []string{}}
		err := runVerify(ctx, *cfgPath, *key, external, dirs, &out)
		switch {
		case err != nil && errors.Is(err, evidence.ErrNoStore):
			out.Verdict = "fail"
			out.Report = &evidence.Report{Problems: []evidence.Problem{{Kind: "missing_store", Detail: err.Error()}}}
			out.Report.Anchored = false
		case err != nil:
			out.Error = err.Error()
		case !out.Report.OK():
			out.Verdict = "fail"
		case out.Report.Anchored:
			out.Verdict = "ok"
		default:
			out.Verdict = "ok_unanchored"
		}
		if *asJSON {
			if jerr := json.NewEncoder(stdout).Encode(out); jerr != nil {
				return jerr
			}
		} else {
			printVerify(stdout, out)
		}
		switch out.Verdict {
		case "error":
			return &exitError{verifyExitError, fmt.Errorf("cannot verify: %w", err)}
		case "fail":
			return &exitError{verifyExitFailed, fmt.Errorf("evidence verification failed: %d problem(s)", len(out.Problems))}
		case "ok_unanchored":
			if *requireAnchor {
				return &exitError{verifyExitUnanchored, errors.New("verified internal consistency only: nothing kept outside the database anchored the result (--require-anchor)")}
			}
		}
		return nil
	}
	return c
}

// runVerify fills out.Report; an error means no report (ErrNoStore: there
// is no store to report on).
func runVerify(ctx context.Context, cfgPath, key string, external, dirs []string, out *verifyOutput) error {
	cfg, err := loadToolConfig(cfgPath)
	if err != nil {
		return err
	}
	vkey, err := verifierKey(cfg, key)
	if err != nil {
		return err
	}
	opts := evidence.VerifyOptions{VerifierKey: vkey}
	for _, p := range external {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("--checkpoint: %w", err)
		}
		opts.External = append(opts.External, b)
	}
	// Anchors are read before the store is opened: the store's snapshot is
	// then at least as new as every anchor, so a gateway appending
	// meanwhile never makes an anchor look ahead of the store.
	explicit := len(dirs) > 0
	if !explicit && cfg.Evidence.CheckpointDir != "" {
		dirs, explicit = []string{cfg.Evidence.CheckpointDir}, true
	}
	if !explicit {
		// Where `serve --dev` copies them when nothing is configured.
		if dev := filepath.Join(cfg.DataDir, devCheckpointDir); dirExists(dev) {
			dirs = []string{dev}
		}
	}
	for _, d := range dirs {
		a, err := evidence.ReadAnchorDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			out.Warnings = append(out.Warnings, fmt.Sprintf("checkpoint directory %s does not exist", d))
			continue
		}
		if err != nil {
			return err
		}
		out.AnchorDirs = append(out.AnchorDirs, d)
		opts.External = append(opts.External, a.Checkpoints...)
		opts.Heads = append(opts.Heads, a.Heads...)
		if len(a.Checkpoints) == 0 {
			out.Warnings = append(out.Warnings, fmt.Sprintf("checkpoint directory %s holds no checkpoint copy", d))
		}
	}
	store, where, err := openStoreReadOnly(ctx, cfg)
	out.Store = where
	if err != nil {
		return err
	}
	l, ok := store.(evidence.Ledger)
	if !ok {
		_ = store.Close()
		return fmt.Errorf("evidence store %T cannot be verified", store)
	}
	r, err := evidence.Verify(ctx, l, opts)
	if cerr := store.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if r.Checkpoints > 0 && r.AnchorCheckpoints == 0 && len(out.AnchorDirs) > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("the store holds %d signed checkpoint(s) but %s has no copy of any: the copies were deleted, or the gateway writes them elsewhere",
			r.Checkpoints, strings.Join(out.AnchorDirs, ", ")))
	}
	for _, u := range r.UnheadedChains {
		out.Warnings = append(out.Warnings, fmt.Sprintf("chain %s (instance %q, %d events) is covered by no chain head copied out: written by a gateway whose heads are kept elsewhere, or straight into the database",
			u.ChainID, u.InstanceID, u.Events))
	}
	out.Report = r
	return nil
}

// verifierKey is --key (a key or a file holding one), else the key derived
// from evidence.signing_key (or --dev's key under data_dir).
func verifierKey(cfg config.Config, key string) (string, error) {
	if b, err := os.ReadFile(key); key != "" && err == nil {
		key = strings.TrimSpace(string(b))
	}
	if key != "" {
		return key, nil
	}
	path := cfg.Evidence.SigningKey
	if path == "" {
		path = filepath.Join(cfg.DataDir, "evidence-signing.key")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("no --key and no signing key to derive it from: %w", err)
	}
	return evidence.VerifierKeyFromSigningKey(string(b))
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// openReadOnly loads the config at path and opens its store read-only, for
// the commands that only read evidence (query, export): like verify, they
// never create or migrate a store.
func openReadOnly(ctx context.Context, path string) (evidence.Store, error) {
	cfg, err := loadToolConfig(path)
	if err != nil {
		return nil, err
	}
	st, _, err := openStoreReadOnly(ctx, cfg)
	return st, err
}

// openStoreReadOnly opens the configured store for reading only: no
// directory, file or schema is created, nothing is migrated. It also
// names the store for the report (never the database password).
func openStoreReadOnly(ctx context.Context, cfg config.Config) (evidence.Store, string, error) {
	if cfg.DatabaseURL != "" {
		where := "postgres " + redactedURL(cfg.DatabaseURL)
		st, err := postgres.OpenReadOnly(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, where, err
		}
		return st, where, nil
	}
	path := filepath.Join(cfg.DataDir, "evidence.db")
	where := "sqlite " + path
	st, err := sqlite.OpenReadOnly(ctx, path)
	if err != nil {
		return nil, where, err
	}
	return st, where, nil
}

// redactedURL is a database URL without its password.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable database_url)"
	}
	return u.Redacted()
}

func printVerify(w io.Writer, out verifyOutput) {
	if out.Store != "" {
		fmt.Fprintf(w, "store: %s (opened read-only)\n", out.Store)
	}
	for _, warn := range out.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if out.Verdict == "error" {
		fmt.Fprintf(w, "ERROR: cannot verify: %s\n", out.Error)
		return
	}
	r := out.Report
	if len(out.Problems) == 1 && out.Problems[0].Kind == "missing_store" {
		fmt.Fprintf(w, "FAIL missing_store: %s\n", out.Problems[0].Detail)
		fmt.Fprintln(w, "FAIL: there is no evidence to verify: the store is missing or empty")
		return
	}
	fmt.Fprintf(w, "chains %d, events %d, leaves %d, checkpoints %d, not yet checkpointed %d\n",
		r.Chains, r.Events, r.Leaves, r.Checkpoints, r.NotCheckpointed)
	if r.Retained > 0 {
		fmt.Fprintf(w, "retained %d leaves whose events retention dropped (before %s)\n", r.Retained, r.RetainedBefore)
	}
	if len(out.AnchorDirs) > 0 || r.AnchorCheckpoints > 0 || r.AnchorHeads > 0 {
		fmt.Fprintf(w, "anchors: %d checkpoint copies (largest: tree size %d), %d chain heads; from %s\n",
			r.AnchorCheckpoints, r.AnchoredSize, r.AnchorHeads, anchorSources(out.AnchorDirs))
	}
	if len(r.Checks) > 0 {
		fmt.Fprintf(w, "derived data checked: %s\n", strings.Join(r.Checks, ", "))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "FAIL %s: %s\n", p.Kind, p.Detail)
	}
	switch out.Verdict {
	case "fail":
		fmt.Fprintf(w, "FAIL: %d problem(s): the evidence was changed, deleted or rolled back\n", len(r.Problems))
	case "ok":
		fmt.Fprintf(w, "OK: anchored: the store extends the checkpoint copied out at tree size %d (of %d leaves) and holds every chain head copied out (%d)\n",
			r.AnchoredSize, r.Leaves, r.AnchorHeads)
	default:
		fmt.Fprintln(w, "OK (internal consistency only): nothing kept outside the database was checked, so a rollback of the whole store to an earlier copy, or the deletion of events no checkpoint covered, would not show. Set evidence.checkpoint_dir (on another system), or pass --checkpoints DIR.")
	}
}

func anchorSources(dirs []string) string {
	if len(dirs) == 0 {
		return "--checkpoint files"
	}
	return strings.Join(dirs, ", ")
}

func evidenceQueryCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("query [--config FILE] [--principal P] [--tool T] [--decision D] [--session S] [--outcome STATUS] [--error-code C] [--rule ID] [--since T] [--until T] [--limit N]",
		"list receipts as JSON lines, newest first", noArgs)
	f, parsed := filterFlags(fs)
	fs.IntVar(&f.Limit, "limit", 100, "receipts to print (all pages are walked up to this many)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if err := parsed(); err != nil {
			return err
		}
		return cmdEvidenceQuery(c.Context(), *cfgPath, f, c.OutOrStdout())
	}
	return c
}

func cmdEvidenceQuery(ctx context.Context, cfgPath string, f *evidence.Filter, stdout io.Writer) error {
	store, err := openReadOnly(ctx, cfgPath)
	if err != nil {
		return err
	}
	defer store.Close()
	want := f.Limit
	enc := json.NewEncoder(stdout)
	for printed := 0; printed < want; {
		f.Limit = min(1000, want-printed)
		page, err := store.Receipts(ctx, *f)
		if err != nil {
			return err
		}
		for _, r := range page.Receipts {
			if err := enc.Encode(r); err != nil {
				return err
			}
			printed++
		}
		if page.NextCursor == "" || len(page.Receipts) == 0 {
			break
		}
		f.Cursor = page.NextCursor
	}
	return nil
}

// filterFlags declares the receipt filter flags shared by query and export;
// parsed, called after fs.Parse, converts the times.
func filterFlags(fs *pflag.FlagSet) (f *evidence.Filter, parsed func() error) {
	f = &evidence.Filter{}
	var since, until string
	fs.StringVar(&f.Principal, "principal", "", "principal id")
	fs.StringVar(&f.Tool, "tool", "", "tool name")
	fs.StringVar(&f.Decision, "decision", "", "allow, deny or invalid")
	fs.StringVar(&f.SessionID, "session", "", "session id")
	fs.StringVar(&f.Status, "outcome", "", "outcome status: pending, succeeded, failed, timed_out, error or interrupted")
	fs.StringVar(&f.ErrorCode, "error-code", "", "the outcome's contract error code")
	fs.StringVar(&f.Rule, "rule", "", "a rule id the decision names (receipt rule_ids)")
	fs.StringVar(&since, "since", "", "RFC 3339 time (inclusive)")
	fs.StringVar(&until, "until", "", "RFC 3339 time (exclusive)")
	return f, func() error {
		for _, t := range []struct {
			s   string
			dst *time.Time
		}{{since, &f.Since}, {until, &f.Until}} {
			if t.s != "" {
				v, err := time.Parse(time.RFC3339Nano, t.s)
				if err != nil {
					return fmt.Errorf("bad time %q: %w", t.s, err)
				}
				*t.dst = v
			}
		}
		return nil
	}
}

// cmdEvidenceExport is `gateway evidence export`: every matching receipt,
// newest first, as JSON lines or CSV (the columns of GET
// /v1/receipts/export), read from the store directly page by page.
func evidenceExportCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("export [--config FILE] [--format jsonl|csv] [filters]",
		"stream receipts as JSON lines or CSV", noArgs)
	format := fs.String("format", "jsonl", "jsonl or csv")
	f, parsed := filterFlags(fs)
	limit := fs.Int("limit", 0, "stop after this many receipts (0: all)")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		if err := parsed(); err != nil {
			return err
		}
		if *format != "jsonl" && *format != "csv" {
			return fmt.Errorf("--format must be jsonl or csv, got %q", *format)
		}
		store, err := openReadOnly(ctx, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		bw := bufio.NewWriterSize(stdout, 64<<10)
		n, err := exportReceipts(ctx, store, *f, *format, *limit, bw)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		if err != nil {
			return fmt.Errorf("export stopped after %d receipts: %w", n, err)
		}
		return nil
	}
	return c
}

// exportPageSize is how many receipts one store query fetches: memory stays
// bounded by one page whatever the range (keyset pagination).
const exportPageSize = 1000

// exportReceipts streams the filter's receipts to w page by page and
// returns how many it wrote. limit 0 means all.
func exportReceipts(ctx context.Context, store evidence.Store, f evidence.Filter, format string, limit int, w io.Writer) (int, error) {
	enc := json.NewEncoder(w)
	cw := csv.NewWriter(w)
	if format == "csv" {
		if err := cw.Write(gateway.CSVHeader()); err != nil {
			return 0, err
		}
	}
	f.Cursor = ""
	written := 0
	for {
		f.Limit = exportPageSize
		if limit > 0 {
			f.Limit = min(exportPageSize, limit-written)
		}
		page, err := store.Receipts(ctx, f)
		if err != nil {
			return written, err
		}
		for _, r := range page.Receipts {
			if format == "csv" {
				err = cw.Write(gateway.CSVRow(r))
			} else {
				err = enc.Encode(r)
			}
			if err != nil {
				return written, err
			}
			written++
		}
		if format == "csv" {
			cw.Flush()
			if err := cw.Error(); err != nil {
				return written, err
			}
		}
		if page.NextCursor == "" || len(page.Receipts) == 0 || (limit > 0 && written >= limit) {
			return written, nil
		}
		f.Cursor = page.NextCursor
	}
}
