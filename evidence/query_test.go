package evidence_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/evidence"
)

func TestCursorAndNormalize(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)
	id := uuid.MustParse("01968a3c-0000-7000-8000-00000000000a")
	c := evidence.EncodeCursor(at, id)
	tests := []struct {
		name      string
		f         evidence.Filter
		wantLimit int
		wantErr   error
	}{
		{"defaults", evidence.Filter{}, evidence.DefaultLimit, nil},
		{"negative limit", evidence.Filter{Limit: -3}, evidence.DefaultLimit, nil},
		{"max limit", evidence.Filter{Limit: 1 << 20}, evidence.MaxLimit, nil},
		{"kept limit", evidence.Filter{Limit: 7, Cursor: c}, 7, nil},
		{"garbage cursor", evidence.Filter{Cursor: "%%%"}, 0, evidence.ErrBadCursor},
		{"wrong version", evidence.Filter{Cursor: "YzIuMS4y"}, 0, evidence.ErrBadCursor},
		{"bad id", evidence.Filter{Cursor: "YzEuMTIzLnh5eg"}, 0, evidence.ErrBadCursor},
		// Forged positions outside what a store can hold as a timestamp
		// (PostgreSQL's range ends in 4713 BC; pgx's encoding overflows).
		{"position before 1970", evidence.Filter{Cursor: forgedCursor("-9223372036854775808", id)}, 0, evidence.ErrBadCursor},
		{"position after 9999", evidence.Filter{Cursor: forgedCursor("9223372036854775807", id)}, 0, evidence.ErrBadCursor},
		{"bad decision", evidence.Filter{Decision: "perhaps"}, 0, evidence.ErrBadFilter},
		{"until before since", evidence.Filter{Since: at, Until: at.Add(-time.Hour)}, 0, evidence.ErrBadFilter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := tc.f.Normalize()
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Normalize = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if p.Limit != tc.wantLimit {
				t.Errorf("limit %d, want %d", p.Limit, tc.wantLimit)
			}
			if tc.f.Cursor != "" && (!p.After || !p.AfterTime.Equal(at.Truncate(time.Microsecond)) || p.AfterID != id) {
				t.Errorf("cursor decoded to %v %s %s", p.After, p.AfterTime, p.AfterID)
			}
		})
	}
}

// TestTextNeedle: the text search is bounded, refuses control characters
// and is spelled the way encoding/json stores args and reasons.
func TestTextNeedle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text, needle string
		bad          bool
	}{
		{text: "/srv/work", needle: "/srv/work"},
		{text: `<img src="x">`, needle: `\u003cimg src=\"x\"\u003e`},
		{text: "ünïcode ✓", needle: "ünïcode ✓"},
		{text: strings.Repeat("a", evidence.MaxTextLen), needle: strings.Repeat("a", evidence.MaxTextLen)},
		{text: strings.Repeat("a", evidence.MaxTextLen+1), bad: true},
		{text: "a\x00b", bad: true},
		{text: "a\nb", bad: true},
		{text: "\xff", bad: true},
	}
	for _, tc := range tests {
		p, err := evidence.Filter{Text: tc.text}.Normalize()
		if tc.bad {
			if !errors.Is(err, evidence.ErrBadFilter) {
				t.Errorf("Normalize(%q) error %v, want ErrBadFilter", tc.text, err)
			}
			continue
		}
		if err != nil || p.Needle != tc.needle {
			t.Errorf("Normalize(%q) = %q, %v; want %q", tc.text, p.Needle, err, tc.needle)
		}
	}
}

// forgedCursor spells a cursor by hand, as a client tampering with one would.
func forgedCursor(micros string, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte("c1." + micros + "." + id.String()))
}
