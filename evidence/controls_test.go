package evidence

import (
	"math"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// TestDecideQuotaLimits: a batch's requests are admitted only when every
// quota fits its limit, counting what the same request draws on the same
// counter through another of its quotas (a decision that names one key
// twice draws twice), and sums that would pass the largest int64 refuse
// instead of wrapping round to a small number that fits.
func TestDecideQuotaLimits(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	q := func(key string, limit, cost int64) wire.Quota {
		return wire.Quota{Key: key, Limit: limit, WindowS: 60, Cost: cost}
	}
	key := func(k string) CounterKey { return CounterKey{k, 60, WindowStart(now, 60)} }
	for _, tc := range []struct {
		name     string
		used     map[CounterKey]int64
		requests [][]wire.Quota
		admitted []bool
		drawn    map[string]int64
	}{
		{"fits", nil, [][]wire.Quota{{q("a", 2, 1)}, {q("a", 2, 1)}, {q("a", 2, 1)}},
			[]bool{true, true, false}, map[string]int64{"a": 2}},
		{"one key named twice draws twice", nil, [][]wire.Quota{{q("a", 1, 1), q("a", 1, 1)}},
			[]bool{false}, map[string]int64{}},
		{"one key named twice within the limit", nil, [][]wire.Quota{{q("a", 4, 2), q("a", 4, 2)}, {q("a", 4, 1)}},
			[]bool{true, false}, map[string]int64{"a": 4}},
		{"all or none", nil, [][]wire.Quota{{q("a", 5, 1), q("b", 0, 1)}, {q("a", 5, 1)}},
			[]bool{false, true}, map[string]int64{"a": 1}},
		{"no int64 wrap on the stored count", map[CounterKey]int64{key("a"): math.MaxInt64 - 5}, [][]wire.Quota{{q("a", math.MaxInt64, 10)}},
			[]bool{false}, map[string]int64{}},
		{"no int64 wrap within a batch", nil, [][]wire.Quota{{q("a", math.MaxInt64, math.MaxInt64-1)}, {q("a", math.MaxInt64, math.MaxInt64)}},
			[]bool{true, false}, map[string]int64{"a": math.MaxInt64 - 1}},
		{"a lowered limit under the stored count", map[CounterKey]int64{key("a"): 10}, [][]wire.Quota{{q("a", 5, 1)}},
			[]bool{false}, map[string]int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			used := map[CounterKey]int64{}
			for k, v := range tc.used {
				used[k] = v
			}
			var batch []*QuotaRequest
			for _, qs := range tc.requests {
				batch = append(batch, &QuotaRequest{Quotas: SortQuotas(qs), Now: now})
			}
			add, _ := Decide(batch, used)
			for i, r := range batch {
				if got := r.exceeded == nil && r.draws != nil; got != tc.admitted[i] {
					t.Errorf("request %d admitted = %v, want %v", i, got, tc.admitted[i])
				}
			}
			for k, v := range add {
				if v != tc.drawn[k.Key] {
					t.Errorf("drawn on %s = %d, want %d", k.Key, v, tc.drawn[k.Key])
				}
				if v != 0 && used[k]+v < used[k] {
					t.Errorf("counter %s would wrap: %d + %d", k.Key, used[k], v)
				}
			}
			for k, v := range tc.drawn {
				if add[key(k)] != v {
					t.Errorf("drawn on %s = %d, want %d", k, add[key(k)], v)
				}
			}
		})
	}
}
