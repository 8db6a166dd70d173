package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"io"
	"log/slog"
	"os"
	"os/user"
	"time"

	"github.com/google/uuid"
	"golang.org/x/mod/sumdb/note"

	"github.com/portcullis/portcullis/cmd/gateway/internal/config"
	"github.com/portcullis/portcullis/evidence"
)

// exitLegalHold is the exit status of `gateway evidence retain` when it
// kept expiring months under legal hold (it still dropped the others): a
// scheduler can tell "blocked by a hold, as intended" (3) from a failure
// (1).
const exitLegalHold = 3

// exitCodeError carries a process exit status other than 1 to run.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }
func (e *exitCodeError) ExitCode() int { return e.code }

// evidenceHoldCmd is `gateway evidence hold place|list|release`: legal
// holds, written straight to the configured store through a chained
// evidence writer (instance "<instance_id>/holds"). TIME is RFC 3339
// (2025-01-01T00:00:00Z) or a date (2025-01-01, UTC midnight).
func evidenceHoldCmd() *cobra.Command {
	return group("hold", "place, list and release legal holds", holdPlaceCmd(), holdListCmd(), holdReleaseCmd())
}

// openHoldStore opens the configured store and a writer on its own chain.
func openHoldStore(ctx context.Context, cfgPath string) (evidence.HoldStore, *evidence.Writer, func(), error) {
	st, cfg, err := openConfiguredStore(ctx, cfgPath)
	if err != nil {
		return nil, nil, nil, err
	}
	hs, ok := st.(evidence.HoldStore)
	if !ok {
		st.Close()
		return nil, nil, nil, fmt.Errorf("evidence hold: store %T does not support legal holds", st)
	}
	inst := cfg.InstanceID
	if inst == "" {
		inst, _ = os.Hostname()
	}
	w := evidence.NewWriter(st, evidence.WriterOptions{InstanceID: inst + "/holds"})
	return hs, w, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Close(ctx); err == nil {
			if err := recordHoldHead(cfg, w); err != nil {
				fmt.Fprintf(os.Stderr, "warning: the hold chain's head was not copied to evidence.checkpoint_dir (evidence verify will list the chain as unheaded): %v\n", err)
			}
		}
		st.Close()
	}, nil
}

// recordHoldHead copies the hold chain's head to evidence.checkpoint_dir,
// signed with the checkpoint key, as serve does for its own chain, so
// `evidence verify` holds the chain against it and does not list it among
// the chains no head covers. Nothing to do without a key or a directory.
func recordHoldHead(cfg config.Config, w *evidence.Writer) error {
	if cfg.Evidence.SigningKey == "" || cfg.Evidence.CheckpointDir == "" {
		return nil
	}
	skey, err := signingKey(cfg, false, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return fmt.Errorf("evidence.signing_key: %w", err)
	}
	r, err := evidence.NewHeadRecorder(w, evidence.HeadRecorderOptions{Signer: signer, Dir: cfg.Evidence.CheckpointDir})
	if err != nil {
		return err
	}
	return r.Record()
}

// operator names who runs the CLI when --by is not given: there are no API
// credentials here, so the OS account is recorded.
func operator() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	return "cli:unknown"
}

func parseHoldTime(flagName, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time (2025-01-01T00:00:00Z) or a date (2025-01-01)", flagName, v)
}

func holdPlaceCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("place --config FILE --since TIME [--until TIME] --reason TEXT [--by PRINCIPAL]",
		"place a legal hold", noArgs)
	sinceF := fs.String("since", "", "start of the held evidence (required)")
	untilF := fs.String("until", "", "end of the held evidence, exclusive (default: open-ended)")
	reason := fs.String("reason", "", "case or matter reference and why (required)")
	by := fs.String("by", operator(), "who places the hold, as recorded")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		since, err := parseHoldTime("since", *sinceF)
		if err != nil {
			return err
		}
		until, err := parseHoldTime("until", *untilF)
		if err != nil {
			return err
		}
		req := evidence.PlaceHoldRequest{Since: since, Until: until, Reason: *reason, PlacedBy: *by}
		if err := req.Validate(); err != nil {
			return cliHoldError(err)
		}
		hs, w, closeAll, err := openHoldStore(ctx, *cfgPath)
		if err != nil {
			return err
		}
		defer closeAll()
		h, err := evidence.PlaceHold(ctx, hs, w, req)
		if err != nil {
			return cliHoldError(err)
		}
		fmt.Fprintf(stdout, "placed legal hold %s on %s\n", h.ID, holdRange(h))
		return nil
	}
	return c
}

func holdListCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("list --config FILE [--active] [--json]",
		"list legal holds", noArgs)
	active := fs.Bool("active", false, "only holds not released")
	asJSON := fs.Bool("json", false, "one JSON object per line")
	c.RunE = func(c *cobra.Command, pos []string) error {
		ctx, stdout := c.Context(), c.OutOrStdout()
		st, _, err := openConfiguredStore(ctx, *cfgPath)
		if err != nil {
			return err
		}
		defer st.Close()
		hs, ok := st.(evidence.HoldStore)
		if !ok {
			return fmt.Errorf("evidence hold: store %T does not support legal holds", st)
		}
		holds, err := evidence.ListHolds(ctx, hs)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		n := 0
		for _, h := range holds {
			if *active && !h.Active {
				continue
			}
			n++
			if *asJSON {
				if err := enc.Encode(h); err != nil {
					return err
				}
				continue
			}
			state := "active"
			if !h.Active {
				state = fmt.Sprintf("released %s by %s: %q", h.ReleasedAt.Format(time.RFC3339), h.ReleasedBy, h.ReleaseReason)
			}
			fmt.Fprintf(stdout, "%s  %s  placed %s by %s  %q  %s\n", h.ID, holdRange(h), h.PlacedAt.Format(time.RFC3339), h.PlacedBy, h.Reason, state)
		}
		if n == 0 && !*asJSON {
			fmt.Fprintln(stdout, "no legal holds")
		}
		return nil
	}
	return c
}

func holdReleaseCmd() *cobra.Command {
	c, fs, cfgPath := configCmd("release ID --config FILE --reason TEXT [--by PRINCIPAL]",
		"release a legal hold", exactArgs(1))
	reason := fs.String("reason", "", "why the hold ends (required)")
	by := fs.String("by", operator(), "who releases the hold, as recorded")
	c.RunE = func(c *cobra.Command, args []string) error {
		id, err := uuid.Parse(args[0])
		if err != nil {
			return usageErrorf("hold ID %q is not a UUID", args[0])
		}
		return cmdHoldRelease(c.Context(), *cfgPath, id, *reason, *by, c.OutOrStdout())
	}
	return c
}

func cmdHoldRelease(ctx context.Context, cfgPath string, id uuid.UUID, reason, by string, stdout io.Writer) error {
	hs, w, closeAll, err := openHoldStore(ctx, cfgPath)
	if err != nil {
		return err
	}
	defer closeAll()
	h, err := evidence.ReleaseHold(ctx, hs, w, evidence.ReleaseHoldRequest{ID: id, Reason: reason, ReleasedBy: by})
	if err != nil {
		return cliHoldError(err)
	}
	fmt.Fprintf(stdout, "released legal hold %s on %s\n", h.ID, holdRange(h))
	return nil
}

// cliHoldError names the flag behind a field error.
func cliHoldError(err error) error {
	var fe *evidence.HoldFieldError
	if errors.As(err, &fe) {
		name := map[string]string{"placed_by": "by", "released_by": "by"}[fe.Field]
		if name == "" {
			name = fe.Field
		}
		return fmt.Errorf("--%s: %s", name, fe.Message)
	}
	return err
}

func holdRange(h evidence.Hold) string {
	until := "open-ended"
	if h.Until != nil {
		until = h.Until.Format(time.RFC3339)
	}
	return fmt.Sprintf("[%s, %s)", h.Since.Format(time.RFC3339), until)
}
