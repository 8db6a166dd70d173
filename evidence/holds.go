package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// Hold is one legal hold, folded from its legal_hold event and, once
// released, its legal_hold_release event (the wire type).
type Hold = wire.Hold

// MaxHoldReason bounds a hold's reason and a release's reason, in bytes.
const MaxHoldReason = 1024

// Errors of legal holds, mapped once at the edge.
var (
	// ErrInvalidHold means a hold or release request is malformed; the
	// error is a *HoldFieldError naming the field (gateway: 400
	// invalid_input with details.field).
	ErrInvalidHold = errors.New("evidence: invalid legal hold request")
	// ErrHoldReleased means the hold was already released (gateway: 412
	// precondition_failed). A released hold cannot be released again nor
	// re-activated: place a new one.
	ErrHoldReleased = errors.New("evidence: legal hold already released")
	// ErrHoldNotFound means no hold has that id; it is also ErrNotFound
	// (gateway: 404 not_found).
	ErrHoldNotFound = fmt.Errorf("evidence: no such legal hold: %w", ErrNotFound)
	// ErrLegalHold means Retain kept months because active legal holds
	// overlap them; the error is a *HeldError. Months no hold covers were
	// still dropped.
	ErrLegalHold = errors.New("evidence: months kept under legal hold")
)

// HoldFieldError is an ErrInvalidHold naming the offending field.
type HoldFieldError struct {
	Field   string
	Message string
}

func (e *HoldFieldError) Error() string {
	return fmt.Sprintf("evidence: legal hold: %s: %s", e.Field, e.Message)
}

// Is makes errors.Is(err, ErrInvalidHold) hold.
func (e *HoldFieldError) Is(target error) bool { return target == ErrInvalidHold }

// HoldBody is the body of a legal_hold event.
type HoldBody struct {
	HoldID string `json:"hold_id"`
	// Since and Until bound the held evidence, [since, until), RFC 3339
	// UTC whole seconds; Until empty means open-ended.
	Since    string `json:"since"`
	Until    string `json:"until,omitempty"`
	Reason   string `json:"reason"`
	PlacedBy string `json:"placed_by"`
}

// HoldReleaseBody is the body of a legal_hold_release event.
type HoldReleaseBody struct {
	HoldID     string `json:"hold_id"`
	Reason     string `json:"reason"`
	ReleasedBy string `json:"released_by"`
}

// HoldStore is what legal holds need of a store. Both stores implement it.
type HoldStore interface {
	Store
	// HoldEvents returns every stored legal_hold and legal_hold_release
	// event, oldest first.
	HoldEvents(ctx context.Context) ([]Event, error)
	// LockHolds takes the store-wide legal hold lock, waiting until it is
	// free or ctx ends: PlaceHold and ReleaseHold hold it around their
	// append, Retain from reading the holds until its last drop, so no
	// hold is placed between retention's check and its drop. The lock
	// dies with its holder's process (or database session).
	LockHolds(ctx context.Context) (unlock func(), err error)
}

// Appender appends events through the chained evidence Writer.
type Appender interface {
	Append(ctx context.Context, events ...Event) error
}

// PlaceHoldRequest is a legal hold to place.
type PlaceHoldRequest struct {
	Since time.Time
	// Until is exclusive; zero means open-ended.
	Until  time.Time
	Reason string
	// PlacedBy is the principal id of the caller (from its credentials).
	PlacedBy string
	// Now is the event's time; zero means time.Now().
	Now time.Time
}

// ReleaseHoldRequest is a legal hold to release.
type ReleaseHoldRequest struct {
	ID     uuid.UUID
	Reason string
	// ReleasedBy is the principal id of the caller (from its credentials).
	ReleasedBy string
	// Now is the event's time; zero means time.Now().
	Now time.Time
}

func eventTime(now time.Time) time.Time {
	if now.IsZero() {
		now = time.Now()
	}
	return NormalizeTime(now)
}

// validReason checks a hold or release reason.
func validReason(field, reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return &HoldFieldError{field, "a reason is required: the case or matter reference and why evidence must be kept"}
	case len(reason) > MaxHoldReason:
		return &HoldFieldError{field, fmt.Sprintf("%d bytes; at most %d are accepted", len(reason), MaxHoldReason)}
	case !utf8.ValidString(reason):
		return &HoldFieldError{field, "must be UTF-8 text"}
	case strings.ContainsFunc(reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }):
		return &HoldFieldError{field, "must not contain control characters"}
	}
	return nil
}

// holdBounds normalizes a hold's range to whole UTC seconds, widening it
// (since down, until up) so the hold never covers less than asked.
func holdBounds(since, until time.Time) (time.Time, time.Time) {
	since = since.UTC().Truncate(time.Second)
	if !until.IsZero() {
		u := until.UTC()
		if t := u.Truncate(time.Second); !t.Equal(u) {
			u = t.Add(time.Second)
		}
		until = u
	}
	return since, until
}

// Validate checks the request, naming the field at fault.
func (r PlaceHoldRequest) Validate() error {
	if r.Since.IsZero() {
		return &HoldFieldError{"since", "required: the start of the held evidence, an RFC 3339 time such as 2025-01-01T00:00:00Z"}
	}
	if r.Since.Year() < 1970 || r.Since.Year() > 9999 {
		return &HoldFieldError{"since", "must be between 1970 and 9999"}
	}
	if !r.Until.IsZero() {
		if r.Until.Year() > 9999 {
			return &HoldFieldError{"until", "must be before the year 10000"}
		}
		if !r.Until.After(r.Since) {
			return &HoldFieldError{"until", "must be after since (omit it for an open-ended hold)"}
		}
	}
	if err := validReason("reason", r.Reason); err != nil {
		return err
	}
	if strings.TrimSpace(r.PlacedBy) == "" {
		return &HoldFieldError{"placed_by", "the principal placing the hold is required"}
	}
	return nil
}

// PlaceHold records a legal hold: it appends a chained legal_hold event
// through w under the store's hold lock, so a retention run either sees the
// hold or has finished dropping before it is placed. The hold's id is the
// event's id.
func PlaceHold(ctx context.Context, s HoldStore, w Appender, r PlaceHoldRequest) (Hold, error) {
	if err := r.Validate(); err != nil {
		return Hold{}, err
	}
	since, until := holdBounds(r.Since, r.Until)
	id, err := uuid.NewV7()
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: place legal hold: new id: %w", err)
	}
	body := HoldBody{HoldID: id.String(), Since: since.Format(time.RFC3339), Reason: r.Reason, PlacedBy: r.PlacedBy}
	if !until.IsZero() {
		body.Until = until.Format(time.RFC3339)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: place legal hold: encode: %w", err)
	}
	unlock, err := s.LockHolds(ctx)
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: place legal hold: take the hold lock: %w", err)
	}
	defer unlock()
	now := eventTime(r.Now)
	e := Event{ID: id, ReceiptID: id, Kind: KindLegalHold, Time: now, PrincipalID: r.PlacedBy, Body: raw}
	if err := w.Append(ctx, e); err != nil {
		return Hold{}, fmt.Errorf("evidence: place legal hold: record it: %w", err)
	}
	h := Hold{ID: id.String(), Since: since, Reason: r.Reason, PlacedBy: r.PlacedBy, PlacedAt: now, Active: true}
	if !until.IsZero() {
		h.Until = &until
	}
	return h, nil
}

// ReleaseHold records the release of hold r.ID by r.ReleasedBy: a chained
// legal_hold_release event, appended under the hold lock. Nothing is
// updated or deleted; the hold stays listed, released. ErrNotFound when
// no such hold is stored, ErrHoldReleased when it was already released.
func ReleaseHold(ctx context.Context, s HoldStore, w Appender, r ReleaseHoldRequest) (Hold, error) {
	id, reason, releasedBy := r.ID, r.Reason, r.ReleasedBy
	if err := validReason("reason", reason); err != nil {
		return Hold{}, err
	}
	if strings.TrimSpace(releasedBy) == "" {
		return Hold{}, &HoldFieldError{"released_by", "the principal releasing the hold is required"}
	}
	unlock, err := s.LockHolds(ctx)
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: take the hold lock: %w", id, err)
	}
	defer unlock()
	holds, err := ListHolds(ctx, s)
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: %w", id, err)
	}
	i := slices.IndexFunc(holds, func(h Hold) bool { return h.ID == id.String() })
	if i < 0 {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: %w", id, ErrHoldNotFound)
	}
	h := holds[i]
	if !h.Active {
		return h, fmt.Errorf("evidence: release legal hold %s: released by %s at %s: %w", id, h.ReleasedBy, h.ReleasedAt.Format(time.RFC3339), ErrHoldReleased)
	}
	raw, err := json.Marshal(HoldReleaseBody{HoldID: h.ID, Reason: reason, ReleasedBy: releasedBy})
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: encode: %w", id, err)
	}
	eid, err := uuid.NewV7()
	if err != nil {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: new id: %w", id, err)
	}
	now := eventTime(r.Now)
	e := Event{ID: eid, ReceiptID: eid, Kind: KindLegalHoldRelease, Time: now, PrincipalID: releasedBy, Body: raw}
	if err := w.Append(ctx, e); err != nil {
		return Hold{}, fmt.Errorf("evidence: release legal hold %s: record it: %w", id, err)
	}
	h.Active, h.ReleasedBy, h.ReleasedAt, h.ReleaseReason, h.ReleaseEventID = false, releasedBy, &now, reason, eid.String()
	return h, nil
}

// ListHolds folds the stored hold events into holds, oldest placement
// first. A release whose placement is no longer stored (retention dropped
// its month) is ignored; a hold stays active until a release names it.
func ListHolds(ctx context.Context, s HoldStore) ([]Hold, error) {
	evs, err := s.HoldEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("evidence: list legal holds: %w", err)
	}
	return foldHolds(evs)
}

func foldHolds(evs []Event) ([]Hold, error) {
	var holds []Hold
	at := map[string]int{}
	for _, e := range evs {
		switch e.Kind {
		case KindLegalHold:
			var b HoldBody
			if err := json.Unmarshal(e.Body, &b); err != nil {
				return nil, fmt.Errorf("evidence: legal_hold event %s: %w", e.ID, err)
			}
			since, err := time.Parse(time.RFC3339, b.Since)
			if err != nil {
				return nil, fmt.Errorf("evidence: legal_hold event %s: since: %w", e.ID, err)
			}
			h := Hold{ID: b.HoldID, Since: since.UTC(), Reason: b.Reason, PlacedBy: b.PlacedBy, PlacedAt: e.Time.UTC(), Active: true}
			if b.Until != "" {
				until, err := time.Parse(time.RFC3339, b.Until)
				if err != nil {
					return nil, fmt.Errorf("evidence: legal_hold event %s: until: %w", e.ID, err)
				}
				until = until.UTC()
				h.Until = &until
			}
			if _, dup := at[h.ID]; dup {
				continue
			}
			at[h.ID] = len(holds)
			holds = append(holds, h)
		case KindLegalHoldRelease:
			var b HoldReleaseBody
			if err := json.Unmarshal(e.Body, &b); err != nil {
				return nil, fmt.Errorf("evidence: legal_hold_release event %s: %w", e.ID, err)
			}
			i, ok := at[b.HoldID]
			if !ok || !holds[i].Active {
				continue
			}
			t := e.Time.UTC()
			h := &holds[i]
			h.Active, h.ReleasedBy, h.ReleasedAt, h.ReleaseReason, h.ReleaseEventID = false, b.ReleasedBy, &t, b.Reason, e.ID.String()
		}
	}
	return holds, nil
}

// Overlaps reports whether hold h covers any instant of [from, to).
func holdOverlaps(h Hold, from, to time.Time) bool {
	return h.Since.Before(to) && (h.Until == nil || from.Before(*h.Until))
}

// KeptMonth is an expiring month retention kept, and why.
type KeptMonth struct {
	RetentionMonth
	// HoldIDs are the holds that keep it.
	HoldIDs []string
	// Reasons say why, one per hold: "under legal hold ID (reason)" or
	// "holds the record of legal hold ID".
	Reasons []string
}

// HeldError is ErrLegalHold: the months Retain kept because of legal holds.
type HeldError struct {
	Kept []KeptMonth
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "evidence: retain: %d expiring month(s) kept under legal hold: ", len(e.Kept))
	for i, k := range e.Kept {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", k.Name, strings.Join(k.Reasons, ", "))
	}
	return b.String()
}

// Is makes errors.Is(err, ErrLegalHold) hold.
func (e *HeldError) Is(target error) bool { return target == ErrLegalHold }

// applyHolds splits expiring months into those to drop and those to keep:
// a month is kept when an active hold overlaps it, when it holds the
// legal_hold event of an active hold (dropping it would silently lift the
// hold), or when it holds the release of a hold whose legal_hold event is
// kept (dropping the release alone would revive the hold).
func applyHolds(months []RetentionMonth, holds []Hold, evs []Event) (drop []RetentionMonth, kept []KeptMonth) {
	keep := make([]KeptMonth, len(months))
	monthOf := func(t time.Time) int {
		return slices.IndexFunc(months, func(m RetentionMonth) bool { return !t.Before(m.From) && t.Before(m.To) })
	}
	mark := func(i int, id, why string) bool {
		if i < 0 || slices.Contains(keep[i].HoldIDs, id) {
			return false
		}
		keep[i].HoldIDs = append(keep[i].HoldIDs, id)
		keep[i].Reasons = append(keep[i].Reasons, why)
		return true
	}
	placedIn := map[string]int{}
	releasedIn := map[string]int{}
	for _, e := range evs {
		var b struct {
			HoldID string `json:"hold_id"`
		}
		if json.Unmarshal(e.Body, &b) != nil {
			continue
		}
		if e.Kind == KindLegalHold {
			placedIn[b.HoldID] = monthOf(e.Time)
		} else if e.Kind == KindLegalHoldRelease {
			releasedIn[b.HoldID] = monthOf(e.Time)
		}
	}
	for _, h := range holds {
		if !h.Active {
			continue
		}
		for i, m := range months {
			if holdOverlaps(h, m.From, m.To) {
				mark(i, h.ID, fmt.Sprintf("under legal hold %s (%q, placed by %s)", h.ID, h.Reason, h.PlacedBy))
			}
		}
		if i, ok := placedIn[h.ID]; ok {
			mark(i, h.ID, fmt.Sprintf("holds the record of active legal hold %s (%q)", h.ID, h.Reason))
		}
	}
	for changed := true; changed; {
		changed = false
		for _, h := range holds {
			p, okP := placedIn[h.ID]
			r, okR := releasedIn[h.ID]
			if h.Active || !okP || !okR || r < 0 {
				continue
			}
			if p < 0 || len(keep[p].HoldIDs) > 0 {
				changed = mark(r, h.ID, fmt.Sprintf("holds the release of legal hold %s, whose placement is kept", h.ID)) || changed
			}
		}
	}
	for i, m := range months {
		if len(keep[i].HoldIDs) == 0 {
			drop = append(drop, m)
			continue
		}
		keep[i].RetentionMonth = m
		kept = append(kept, keep[i])
	}
	return drop, kept
}

// planHolds removes from plan the months legal holds keep, moving them to
// plan.Kept, and moves plan.Before to the end of the newest month still
// dropped. held is a *HeldError when it kept any month, else nil; err is a
// failure to read the holds.
func planHolds(ctx context.Context, s HoldStore, plan *RetentionPlan) (held, err error) {
	if len(plan.Months) == 0 {
		return nil, nil
	}
	evs, err := s.HoldEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("read legal holds: %w", err)
	}
	holds, err := foldHolds(evs)
	if err != nil {
		return nil, err
	}
	plan.Months, plan.Kept = applyHolds(plan.Months, holds, evs)
	plan.Before = time.Time{}
	for _, m := range plan.Months {
		if m.To.After(plan.Before) {
			plan.Before = m.To
		}
	}
	if len(plan.Kept) == 0 {
		return nil, nil
	}
	return &HeldError{Kept: plan.Kept}, nil
}

func heldMonths(kept []KeptMonth) []RetentionHeld {
	var out []RetentionHeld
	for _, k := range kept {
		out = append(out, RetentionHeld{Month: k.From.Format("2006-01"), Holds: k.HoldIDs})
	}
	return out
}
