package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/gateway"
	"github.com/portcullis/portcullis/gateway/config"
)

// devKeyName names the key `serve --dev` generates; it is also the origin
// line of its checkpoints.
const devKeyName = "portcullis.dev/evidence"

// cmdEvidence dispatches `gateway evidence query|verify|export|retain`.
func cmdEvidence(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "verify" {
		return cmdEvidenceVerify(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "export" {
		return cmdEvidenceExport(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "retain" {
		return cmdEvidenceRetain(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "hold" {
		return cmdEvidenceHold(ctx, args[1:], stdout)
	}
	return cmdEvidenceQuery(ctx, args, stdout)
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

// startEvidenceServices starts the checkpointer: every
// evidence.checkpoint_interval, if this process wins the election, new
// events become leaves of the Merkle tree and a signed checkpoint is
// stored (and copied to evidence.checkpoint_dir). stop waits for it. The
// auditor serves proofs and stats; it is nil when checkpoints are off, and
// the gateway then answers those routes 503 evidence_unavailable.
func startEvidenceServices(ctx context.Context, cfg config.Config, dev bool, store evidence.Store, log *slog.Logger) (stop func(), auditor gateway.EvidenceAuditor, err error) {
	skey, err := signingKey(cfg, dev, log)
	if err != nil {
		return nil, nil, err
	}
	if skey == "" {
		log.Warn("evidence.signing_key is not set: no signed checkpoints; the hash chains alone cannot show a rewrite of the whole table")
		return func() {}, nil, nil
	}
	l, ok := store.(evidence.Ledger)
	if !ok {
		return nil, nil, fmt.Errorf("evidence store %T cannot keep checkpoints", store)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, nil, fmt.Errorf("evidence.signing_key: %w", err)
	}
	vkey, err := evidence.VerifierKeyFromSigningKey(skey)
	if err != nil {
		return nil, nil, err
	}
	c, err := evidence.NewCheckpointer(l, evidence.CheckpointerOptions{
		Signer: signer, Interval: time.Duration(cfg.Evidence.CheckpointInterval),
		Dir: cfg.Evidence.CheckpointDir, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Run(cctx)
	}()
	return func() { cancel(); wg.Wait() }, evidence.NewAuditor(l, vkey), nil
}

// cmdEvidenceVerify is `gateway evidence verify`: it checks the whole store
// and exits non-zero, naming each problem, when anything is wrong.
func cmdEvidenceVerify(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("evidence verify", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	key := fs.String("key", "", "verifier key (name+hash+key) or a file holding it; default: derived from evidence.signing_key")
	var external []string
	fs.Func("checkpoint", "a checkpoint kept outside the database (file); repeatable", func(s string) error {
		external = append(external, s)
		return nil
	})
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadToolConfig(*cfgPath)
	if err != nil {
		return err
	}
	vkey := *key
	if b, err := os.ReadFile(vkey); vkey != "" && err == nil {
		vkey = strings.TrimSpace(string(b))
	}
	if vkey == "" {
		path := cfg.Evidence.SigningKey
		if path == "" {
			path = filepath.Join(cfg.DataDir, "evidence-signing.key")
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("no --key and no signing key to derive it from: %w", err)
		}
		if vkey, err = evidence.VerifierKeyFromSigningKey(string(b)); err != nil {
			return err
		}
	}
	opts := evidence.VerifyOptions{VerifierKey: vkey}
	for _, p := range external {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("--checkpoint: %w", err)
		}
		opts.External = append(opts.External, b)
	}
	store, _, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	l, ok := store.(evidence.Ledger)
	if !ok {
		return fmt.Errorf("evidence store %T cannot be verified", store)
	}
	r, err := evidence.Verify(ctx, l, opts)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "chains %d, events %d, leaves %d, checkpoints %d, not yet checkpointed %d\n",
			r.Chains, r.Events, r.Leaves, r.Checkpoints, r.NotCheckpointed)
		for _, p := range r.Problems {
			fmt.Fprintf(stdout, "FAIL %s: %s\n", p.Kind, p.Detail)
		}
	}
	if !r.OK() {
		return fmt.Errorf("evidence verification failed: %d problem(s)", len(r.Problems))
	}
	fmt.Fprintln(stdout, "OK")
	return nil
}

func cmdEvidenceQuery(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "query" {
		return errors.New("usage: gateway evidence query [--config FILE] [--principal P] [--tool T] [--decision D] [--session S] [--outcome STATUS] [--error-code C] [--rule ID] [--since T] [--until T] [--limit N]")
	}
	fs := flag.NewFlagSet("evidence query", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	f, parsed := filterFlags(fs)
	fs.IntVar(&f.Limit, "limit", 100, "receipts to print (all pages are walked up to this many)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := parsed(); err != nil {
		return err
	}
	store, _, err := openConfiguredStore(ctx, *cfgPath)
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
func filterFlags(fs *flag.FlagSet) (f *evidence.Filter, parsed func() error) {
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
func cmdEvidenceExport(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("evidence export", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	format := fs.String("format", "jsonl", "jsonl or csv")
	f, parsed := filterFlags(fs)
	limit := fs.Int("limit", 0, "stop after this many receipts (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := parsed(); err != nil {
		return err
	}
	if *format != "jsonl" && *format != "csv" {
		return fmt.Errorf("--format must be jsonl or csv, got %q", *format)
	}
	store, _, err := openConfiguredStore(ctx, *cfgPath)
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
