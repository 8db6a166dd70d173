package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// RetentionMonth is one calendar month (UTC) of events that retention
// drops: [From, To).
type RetentionMonth struct {
	// Name is the store's name for the month: the partition
	// (evidence_events_2025_09) on PostgreSQL, 2025-09 on SQLite.
	Name     string
	From, To time.Time
	// Rows is the number of events the month holds.
	Rows int64
}

// RetentionPlan is what Retain drops: whole months that ended at or before
// Cutoff, never the current month or a later one. Before is the end of the
// newest: the retention event says events older than Before may be gone.
type RetentionPlan struct {
	Cutoff time.Time
	Before time.Time
	Months []RetentionMonth
	// Kept are expiring months that active legal holds keep (holds.go);
	// they are not in Months.
	Kept []KeptMonth
}

// RetainOptions configure Retain.
type RetainOptions struct {
	// Retention is evidence.retention: events older than Now-Retention
	// expire, a whole month at a time.
	Retention time.Duration
	Now       time.Time
	// DryRun plans and counts, and changes nothing.
	DryRun bool
	// InstanceID of the writer that appends the retention event (its own
	// chain; the CLI uses "<instance_id>/retention").
	InstanceID string
	// Signer, when set, runs checkpointer passes before the drop (if no
	// other process leads), so every expiring event and the retention
	// event itself are under a signed checkpoint.
	Signer note.Signer
	// HeadDir, with Signer, is where the retention chain's head is copied
	// (evidence.checkpoint_dir), so Verify holds that chain against it and
	// does not list it among the chains no head covers.
	HeadDir string
	Logger  *slog.Logger
}

// RetentionStore is what Retain needs of a store beyond its Ledger. Both
// stores implement it.
type RetentionStore interface {
	Ledger
	HoldStore
	// PlanRetention lists the months that expire at cutoff, with their
	// event counts: months that ended at or before cutoff, never the month
	// of now or a later one.
	PlanRetention(ctx context.Context, cutoff, now time.Time) (RetentionPlan, error)
	// Unsealed counts the month's events that are not leaves of the Merkle
	// tree: dropping them would look like a deletion to Verify.
	Unsealed(ctx context.Context, m RetentionMonth) (int64, error)
	// DropMonth removes the month's events. Retain calls it only after the
	// retention event that covers the month is committed.
	DropMonth(ctx context.Context, m RetentionMonth) error
}

// ErrUnsealed means retention refused to drop events that are not yet in
// the signed tree (run the checkpointer first: evidence.signing_key).
var ErrUnsealed = errors.New("evidence: events not yet in the signed tree")

// Retain expires evidence older than the retention period, whole months at
// a time, in this order: (1) checkpointer passes when a signer is given and
// no other process leads; (2) refuse if any expiring event is not a leaf
// of the tree (Verify could not tell its drop from a deletion); (3) append
// a chained retention event naming the months and the bound Before, and
// checkpoint it; (4) drop each month (RetentionStore.DropMonth). Verify then
// accepts the gap: a missing event whose leaf is in the tree and older than
// a verified retention event's Before.
func Retain(ctx context.Context, s RetentionStore, opts RetainOptions) (RetentionPlan, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Retention <= 0 {
		return RetentionPlan{}, errors.New("evidence: retain: retention must be positive")
	}
	if opts.InstanceID == "" && !opts.DryRun {
		return RetentionPlan{}, errors.New("evidence: retain: the retention event needs an instance id")
	}
	if !opts.DryRun {
		// Held from reading the holds until the last drop: a hold placed
		// meanwhile waits, and retention never drops what it covers.
		unlock, err := s.LockHolds(ctx)
		if err != nil {
			return RetentionPlan{}, fmt.Errorf("evidence: retain: take the legal hold lock: %w", err)
		}
		defer unlock()
	}
	plan, err := s.PlanRetention(ctx, opts.Now.Add(-opts.Retention), opts.Now)
	if err != nil {
		return plan, fmt.Errorf("evidence: retain: plan: %w", err)
	}
	held, err := planHolds(ctx, s, &plan)
	if err != nil {
		return plan, fmt.Errorf("evidence: retain: %w", err)
	}
	if opts.DryRun || len(plan.Months) == 0 {
		return plan, held
	}
	if err := checkpointAll(ctx, s, opts); err != nil {
		return plan, fmt.Errorf("evidence: retain: checkpoint before: %w", err)
	}
	for _, m := range plan.Months {
		n, err := s.Unsealed(ctx, m)
		if err != nil {
			return plan, fmt.Errorf("evidence: retain: %s: %w", m.Name, err)
		}
		if n > 0 {
			return plan, fmt.Errorf("evidence: retain: %s holds %d events not yet in the signed tree: run the checkpointer (evidence.signing_key) first: %w", m.Name, n, ErrUnsealed)
		}
	}
	months := make([]string, len(plan.Months))
	for i, m := range plan.Months {
		months[i] = m.From.Format("2006-01")
	}
	body, err := json.Marshal(RetentionBody{
		Before:     plan.Before.UTC().Format(time.RFC3339),
		From:       plan.Months[0].From.UTC().Format(time.RFC3339),
		Months:     months,
		Retention:  opts.Retention.String(),
		Partitions: len(plan.Months),
		Held:       heldMonths(plan.Kept),
	})
	if err != nil {
		return plan, fmt.Errorf("evidence: retain: encode retention event: %w", err)
	}
	w := NewWriter(s, WriterOptions{InstanceID: opts.InstanceID, Logger: opts.Logger})
	err = w.Append(ctx, Event{Kind: KindRetention, Body: body})
	if cerr := w.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return plan, fmt.Errorf("evidence: retain: retention event: %w", err)
	}
	if opts.Signer != nil && opts.HeadDir != "" {
		hr, err := NewHeadRecorder(w, HeadRecorderOptions{Signer: opts.Signer, Dir: opts.HeadDir, Logger: opts.Logger})
		if err == nil {
			err = hr.Record()
		}
		if err != nil {
			return plan, fmt.Errorf("evidence: retain: copy the retention chain's head: %w", err)
		}
	}
	if err := checkpointAll(ctx, s, opts); err != nil {
		return plan, fmt.Errorf("evidence: retain: checkpoint the retention event: %w", err)
	}
	for _, m := range plan.Months {
		if err := s.DropMonth(ctx, m); err != nil {
			return plan, fmt.Errorf("evidence: retain: drop %s: %w", m.Name, err)
		}
		opts.Logger.Info("evidence month dropped", "month", m.Name, "events", m.Rows)
	}
	return plan, held
}

// RetentionBody is the body of a retention event.
type RetentionBody struct {
	// Before: events older than this may be gone (RFC 3339, UTC).
	Before string `json:"before"`
	// From is the start of the oldest month dropped.
	From   string   `json:"from"`
	Months []string `json:"months"`
	// Partitions counts the months (the name is PostgreSQL's).
	Partitions int    `json:"partitions"`
	Retention  string `json:"retention"`
	// Held lists expiring months kept under legal hold, with the holds.
	Held []RetentionHeld `json:"held,omitempty"`
}

// RetentionHeld is one expiring month a retention run kept under legal
// hold.
type RetentionHeld struct {
	Month string   `json:"month"`
	Holds []string `json:"holds"`
}

// checkpointAll runs checkpointer passes until the tree holds every event,
// when there is a signer and no other process leads.
func checkpointAll(ctx context.Context, l Ledger, opts RetainOptions) error {
	if opts.Signer == nil {
		return nil
	}
	release, ok, err := l.TryLead(ctx)
	if err != nil {
		return err
	}
	if !ok {
		opts.Logger.Info("evidence retain: another process checkpoints; not passing")
		return nil
	}
	defer release()
	c, err := NewCheckpointer(l, CheckpointerOptions{Signer: opts.Signer, Logger: opts.Logger})
	if err != nil {
		return err
	}
	for {
		before, _, err := l.TreeHeads(ctx)
		if err != nil {
			return err
		}
		size, err := c.Pass(ctx)
		if err != nil {
			return err
		}
		if size == before {
			return nil
		}
	}
}

// MonthStart is the first instant (UTC) of t's month.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
