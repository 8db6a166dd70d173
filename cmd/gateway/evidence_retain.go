package main

import (
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/evidence"
)

// cmdEvidenceRetain is `gateway evidence retain --config F [--dry-run]`:
// it appends a chained retention event, then drops the months older than
// evidence.retention: monthly partitions on PostgreSQL, the months' rows on
// the embedded SQLite store (evidence.Retain).
func evidenceRetainCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("retain --config FILE [--dry-run]",
		"drop expired months after a retention event; exit 3 when legal holds kept some months", noArgs)
	dryRun := fs.Bool("dry-run", false, "list the partitions that would be dropped; change nothing")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		cfg, err := loadToolConfig(*cfgPath)
		if err != nil {
			return err
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		var signer note.Signer
		if skey, err := signingKey(cfg, false, log); err != nil {
			return err
		} else if skey != "" {
			if signer, err = note.NewSigner(skey); err != nil {
				return fmt.Errorf("evidence.signing_key: %w", err)
			}
		}
		st, _, err := openStore(ctx, cfg)
		if err != nil {
			return err
		}
		defer st.Close()
		store, ok := st.(evidence.RetentionStore)
		if !ok {
			return fmt.Errorf("evidence retain: store %T does not support retention", st)
		}
		inst := cfg.InstanceID
		if inst == "" {
			inst, _ = os.Hostname()
		}
		plan, err := evidence.Retain(ctx, store, evidence.RetainOptions{
			Retention: cfg.Evidence.Retention.Std(), Now: time.Now(), DryRun: *dryRun,
			InstanceID: inst + "/retention", Signer: signer, HeadDir: cfg.Evidence.CheckpointDir, Logger: log,
		})
		verb := "dropped"
		if *dryRun {
			verb = "would drop"
		}
		for _, p := range plan.Months {
			fmt.Fprintf(stdout, "%s %s [%s, %s): %d events\n", verb, p.Name, p.From.Format("2006-01-02"), p.To.Format("2006-01-02"), p.Rows)
		}
		for _, k := range plan.Kept {
			fmt.Fprintf(stdout, "kept %s [%s, %s): %d events: %s\n", k.Name, k.From.Format("2006-01-02"), k.To.Format("2006-01-02"), k.Rows, strings.Join(k.Reasons, "; "))
		}
		if errors.Is(err, evidence.ErrLegalHold) {
			return &exitCodeError{code: exitLegalHold, err: err}
		}
		if err != nil {
			return err
		}
		if len(plan.Months) == 0 {
			fmt.Fprintf(stdout, "nothing to retain: no month of evidence ends before %s\n", plan.Cutoff.Format(time.RFC3339))
		}
		return nil
	}
	return c
}
