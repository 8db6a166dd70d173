package evidence

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// Page is a normalized Filter: the limit bounded and the cursor decoded, so
// each store builds its keyset query from checked values only.
type Page struct {
	Filter
	// After is true when the page continues after (AfterTime, AfterID) in
	// newest-first order.
	After     bool
	AfterTime time.Time
	AfterID   uuid.UUID
	// Needle is Text as the stored JSON spells it (escaped the way
	// encoding/json writes args and reasons), for a substring match; empty
	// when Text is.
	Needle string
}

// MaxTextLen bounds Filter.Text: a text search scans the receipts in the
// other filters' range, so its pattern stays short.
const MaxTextLen = 200

// textNeedle checks a text search and spells it as stored JSON does.
func textNeedle(text string) (string, error) {
	switch {
	case len(text) > MaxTextLen:
		return "", fmt.Errorf("%w: q is %d bytes; at most %d are accepted", ErrBadFilter, len(text), MaxTextLen)
	case !utf8.ValidString(text) || strings.ContainsFunc(text, unicode.IsControl):
		return "", fmt.Errorf("%w: q must be UTF-8 text without control characters", ErrBadFilter)
	}
	b, _ := json.Marshal(text) // a valid string always encodes
	return string(b[1 : len(b)-1]), nil
}

// Normalize bounds the limit, checks the decision value and decodes the
// cursor. Errors wrap ErrBadCursor or ErrBadFilter, so the gateway can
// answer invalid_input.
func (f Filter) Normalize() (Page, error) {
	p := Page{Filter: f}
	switch {
	case p.Limit <= 0:
		p.Limit = DefaultLimit
	case p.Limit > MaxLimit:
		p.Limit = MaxLimit
	}
	switch p.Decision {
	case "", wire.DecisionAllow, wire.DecisionDeny, wire.DecisionInvalid:
	default:
		return Page{}, fmt.Errorf("%w: decision must be allow, deny or invalid, got %q", ErrBadFilter, p.Decision)
	}
	switch p.Status {
	case "", wire.StatusPending, wire.StatusSucceeded, wire.StatusFailed, wire.StatusTimedOut, wire.StatusError, wire.StatusInterrupted:
	default:
		return Page{}, fmt.Errorf("%w: outcome must be pending, succeeded, failed, timed_out, error or interrupted, got %q", ErrBadFilter, p.Status)
	}
	if p.Rule != "" && !wire.ValidRuleID(p.Rule) {
		return Page{}, fmt.Errorf("%w: rule must be a rule id (1-%d of A-Z a-z 0-9 _ . : / -), got %q", ErrBadFilter, wire.MaxRuleIDLen, p.Rule)
	}
	if p.Text != "" {
		needle, err := textNeedle(p.Text)
		if err != nil {
			return Page{}, err
		}
		p.Needle = needle
	}
	if len(p.ErrorCode) > 64 {
		return Page{}, fmt.Errorf("%w: error_code longer than 64 bytes", ErrBadFilter)
	}
	if !p.Since.IsZero() && !p.Until.IsZero() && !p.Until.After(p.Since) {
		return Page{}, fmt.Errorf("%w: until (%s) must be after since (%s)", ErrBadFilter, p.Until.Format(time.RFC3339Nano), p.Since.Format(time.RFC3339Nano))
	}
	if p.Cursor != "" {
		ts, id, err := DecodeCursor(p.Cursor)
		if err != nil {
			return Page{}, err
		}
		p.After, p.AfterTime, p.AfterID = true, ts, id
	}
	return p, nil
}

const cursorVersion = "c1"

// maxCursorMicros is 9999-12-31T23:59:59.999999Z in Unix microseconds.
const maxCursorMicros = 253402300799999999

// EncodeCursor makes the opaque cursor for the keyset position of the last
// receipt on a page. It is opaque so the encoding can change without
// breaking clients that only echo it back.
func EncodeCursor(ts time.Time, id uuid.UUID) string {
	raw := cursorVersion + "." + strconv.FormatInt(ts.UnixMicro(), 10) + "." + id.String()
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// DecodeCursor reverses EncodeCursor; anything else wraps ErrBadCursor.
func DecodeCursor(s string) (time.Time, uuid.UUID, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 || parts[0] != cursorVersion {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: unknown cursor format", ErrBadCursor)
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || us < 0 || us > maxCursorMicros {
		// Outside 1970..9999 no receipt can sit; a store could not even
		// compare such a time (PostgreSQL errs, pgx's encoding overflows).
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: bad position", ErrBadCursor)
	}
	id, err := uuid.Parse(parts[2])
	if err != nil || len(parts[2]) != 36 {
		return time.Time{}, uuid.Nil, fmt.Errorf("%w: bad id", ErrBadCursor)
	}
	return time.UnixMicro(us).UTC(), id, nil
}

// BuildReceipt assembles the API receipt from a decision event and its
// latest outcome event (nil when none was written yet: status pending).
// Stores share it so both answer with exactly the same shape.
func BuildReceipt(d Event, outcome *Event) wire.Receipt {
	r := wire.Receipt{
		ID:             d.ID.String(),
		Time:           d.Time.UTC(),
		PrincipalID:    d.PrincipalID,
		SessionID:      d.SessionID,
		CallID:         d.CallID,
		Tool:           d.Tool,
		Decision:       d.Decision,
		Reasons:        d.Reasons,
		PolicyRevision: d.PolicyRevision,
		ArgsSHA256:     d.ArgsSHA256,
		Args:           d.Args,
		Scope:          d.Scope,
		TraceID:        d.TraceID,
	}
	if r.Reasons == nil {
		r.Reasons = []string{}
	}
	r.RuleIDs = d.RuleIDs
	if r.RuleIDs == nil {
		r.RuleIDs = []string{}
	}
	if len(r.Args) == 0 {
		r.Args = nil
	}
	if d.ParentReceiptID != nil {
		s := d.ParentReceiptID.String()
		r.ParentReceiptID = &s
	}
	if outcome != nil && outcome.Outcome != nil {
		o := *outcome.Outcome
		if o.Time == nil {
			t := outcome.Time.UTC()
			o.Time = &t
		}
		r.Outcome = &o
	} else {
		r.Outcome = &wire.Outcome{Status: wire.StatusPending}
	}
	r.InstanceID = d.InstanceID
	if r.Outcome.Status != wire.StatusPending {
		r.CompletedAt = r.Outcome.Time
		ms := r.Outcome.DurationMS
		r.DurationMS = &ms
	}
	if d.ChainID != uuid.Nil {
		r.Chain = &wire.ReceiptChain{ID: d.ChainID.String(), Seq: d.ChainSeq, Hash: hex.EncodeToString(d.Hash)}
	}
	return r
}

// LatestOutcome picks the outcome a receipt shows when several were
// written (for example a retried append): the newest by (time, id).
func LatestOutcome(outcomes []Event) *Event {
	var best *Event
	for i := range outcomes {
		o := &outcomes[i]
		if o.Kind != KindOutcome {
			continue
		}
		if best == nil || o.Time.After(best.Time) || (o.Time.Equal(best.Time) && compareUUID(o.ID, best.ID) > 0) {
			best = o
		}
	}
	return best
}

func compareUUID(a, b uuid.UUID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
