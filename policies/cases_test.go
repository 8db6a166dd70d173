package policies

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/portcullis/portcullis/wire"
)

// caseFile is one file of data-driven cases, in the style of OPA's
// conformance suite: an input, optional data deep-merged over the shipped
// data.json, and the subset of the decision that must come back.
type caseFile struct {
	Cases []struct {
		Note  string         `yaml:"note"`
		Input map[string]any `yaml:"input"`
		Data  map[string]any `yaml:"data"`
		Want  map[string]any `yaml:"want"`
	} `yaml:"cases"`
}

func TestCases(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("testdata", "cases", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases under testdata/cases: %v", err)
	}
	shippedData := readShippedData(t)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var cf caseFile
		if err := yaml.Unmarshal(raw, &cf); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(cf.Cases) == 0 {
			t.Fatalf("%s: no cases", p)
		}
		for _, c := range cf.Cases {
			t.Run(filepath.Base(p)+"/"+c.Note, func(t *testing.T) {
				t.Parallel()
				if len(c.Want) == 0 {
					t.Fatal("case has no want")
				}
				fsys := Shipped()
				if c.Data != nil {
					merged := deepMerge(roundTrip(t, shippedData), roundTrip(t, c.Data))
					b, err := json.Marshal(merged)
					if err != nil {
						t.Fatal(err)
					}
					fsys = shippedMap(t, map[string]*string{"data.json": str(string(b))})
				}
				e := loaded(t, fsys)
				// full evaluates every deny rule: the decision's fast path
				// must agree with it.
				full := NewEngine(Options{Now: func() time.Time { return fixedNow }, Query: "data.portcullis.full_decision"})
				if _, err := full.Load(context.Background(), fsys, "test"); err != nil {
					t.Fatal(err)
				}
				var in wire.PolicyInput
				b, err := json.Marshal(c.Input)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(b, &in); err != nil {
					t.Fatalf("input: %v", err)
				}
				if in.Time.IsZero() {
					in.Time = fixedNow
				}
				d, err := e.Decide(context.Background(), in)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				fd, err := full.Decide(context.Background(), in)
				if err != nil {
					t.Fatalf("Decide full_decision: %v", err)
				}
				if diff := cmp.Diff(fd, d); diff != "" {
					t.Errorf("decision differs from full_decision (-full +decision):\n%s", diff)
				}
				got := roundTrip(t, d).(map[string]any)
				want := roundTrip(t, c.Want).(map[string]any)
				for k, w := range want {
					if diff := cmp.Diff(w, got[k]); diff != "" {
						t.Errorf("decision.%s (-want +got):\n%s", k, diff)
					}
				}
			})
		}
	}
}

func shippedEngine(t testing.TB) *Engine {
	t.Helper()
	return loaded(t, Shipped())
}

func readShippedData(t *testing.T) any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("bundle", "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// roundTrip normalizes v to what encoding/json decodes (float64 numbers,
// map[string]any objects) so YAML and Go values compare.
func roundTrip(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// deepMerge merges objects key by key; anything else in over replaces base.
func deepMerge(base, over any) any {
	bo, ok1 := base.(map[string]any)
	oo, ok2 := over.(map[string]any)
	if !ok1 || !ok2 {
		return over
	}
	out := map[string]any{}
	for k, v := range bo {
		out[k] = v
	}
	for k, v := range oo {
		out[k] = deepMerge(out[k], v)
	}
	return out
}
