package evidence

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestApplyHolds(t *testing.T) {
	t.Parallel()
	month := func(m int) RetentionMonth {
		from := time.Date(2025, time.Month(m), 1, 0, 0, 0, 0, time.UTC)
		return RetentionMonth{Name: from.Format("2006-01"), From: from, To: from.AddDate(0, 1, 0)}
	}
	at := func(m int) time.Time { return month(m).From.AddDate(0, 0, 14) }
	place := func(id string, m int, since, until time.Time) Event {
		b := HoldBody{HoldID: id, Since: since.Format(time.RFC3339), Reason: "r-" + id, PlacedBy: "admin"}
		if !until.IsZero() {
			b.Until = until.Format(time.RFC3339)
		}
		raw, _ := json.Marshal(b)
		return Event{ID: uuid.New(), Kind: KindLegalHold, Time: at(m), Body: raw}
	}
	release := func(id string, m int) Event {
		raw, _ := json.Marshal(HoldReleaseBody{HoldID: id, Reason: "done", ReleasedBy: "admin"})
		return Event{ID: uuid.New(), Kind: KindLegalHoldRelease, Time: at(m), Body: raw}
	}
	months := []RetentionMonth{month(1), month(2), month(3), month(4), month(5)}
	for _, tc := range []struct {
		name string
		evs  []Event
		kept []string // month names
	}{
		{"no holds", nil, nil},
		{"active hold overlaps one month", []Event{place("a", 12, at(2), at(2).Add(time.Hour))}, []string{"2025-02"}},
		{"open-ended hold keeps every later month", []Event{place("a", 12, at(4), time.Time{})}, []string{"2025-04", "2025-05"}},
		{"until is exclusive", []Event{place("a", 12, month(2).From, month(3).From)}, []string{"2025-02"}},
		{"released hold keeps nothing", []Event{place("a", 1, at(2), at(3)), release("a", 4)}, nil},
		{"active hold keeps its own record", []Event{place("a", 1, at(4), at(4).Add(time.Hour))}, []string{"2025-01", "2025-04"}},
		{"release kept while the placement is kept", []Event{
			place("a", 2, at(3), at(3).Add(time.Hour)), // released below
			place("b", 12, month(2).From, month(3).From),
			release("a", 5),
		}, []string{"2025-02", "2025-05"}},
		{"release kept while the placement is not expiring", []Event{place("a", 12, at(1), at(1).Add(time.Hour)), release("a", 3)}, []string{"2025-03"}},
		{"release dropped with its placement", []Event{place("a", 1, at(5), at(5).Add(time.Hour)), release("a", 2)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			holds, err := foldHolds(tc.evs)
			if err != nil {
				t.Fatal(err)
			}
			drop, kept := applyHolds(months, holds, tc.evs)
			var got []string
			for _, k := range kept {
				got = append(got, k.Name)
			}
			if !slices.Equal(got, tc.kept) || len(drop)+len(kept) != len(months) {
				t.Fatalf("kept %v (dropped %d); want %v", got, len(drop), tc.kept)
			}
		})
	}
}
