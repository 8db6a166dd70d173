package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
)

// BenchmarkDecide is one realistic passive Exec call through the shipped
// policy: "eval" evaluates every time (memo off), "memo" is a repeated
// input answered from the bundle's memo (memo.go).
func BenchmarkDecide(b *testing.B) {
	for _, c := range []struct {
		name string
		size int
	}{{"eval", -1}, {"memo", 0}} {
		b.Run(c.name, func(b *testing.B) {
			e := NewEngine(Options{MemoSize: c.size})
			if _, err := e.Load(context.Background(), Shipped(), "shipped"); err != nil {
				b.Fatal(err)
			}
			in := execInput("/usr/bin/git", "log", "--oneline", "-n", "5")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, err := e.Decide(ctx, in)
				if err != nil || !d.Allow {
					b.Fatalf("Decide = %+v, %v", d, err)
				}
			}
		})
	}
}

func BenchmarkDecideParallel(b *testing.B) {
	e := loaded(b, Shipped())
	in := execInput("/usr/bin/git", "log", "--oneline", "-n", "5")
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, err := e.Decide(ctx, in)
			if err != nil || !d.Allow {
				b.Errorf("Decide = %+v, %v", d, err)
				return
			}
		}
	})
}

// BenchmarkInput compares ways to build the input value: the direct AST
// build Decide uses, ast.InterfaceToValue on a map, and a JSON round trip.
func BenchmarkInput(b *testing.B) {
	in := execInput("/usr/bin/git", "log", "--oneline", "-n", "5")
	asMap := map[string]any{
		"principal":  map[string]any{"id": in.Principal.ID, "roles": in.Principal.Roles, "attributes": in.Principal.Attributes},
		"tool":       in.Tool,
		"purpose":    in.Purpose,
		"args":       in.Args,
		"resolved":   in.Resolved,
		"session_id": in.SessionID,
		"call_id":    in.CallID,
		"time":       in.Time.Format(time.RFC3339Nano),
	}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := inputValue(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("InterfaceToValue-map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ast.InterfaceToValue(asMap); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json-roundtrip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raw, err := json.Marshal(in)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ast.ValueFromReader(bytesReader(raw)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// BenchmarkDecideTrivialPolicy is the floor: the same input against a
// one-line policy, to tell engine overhead from policy cost.
func BenchmarkDecideTrivialPolicy(b *testing.B) {
	e := loaded(b, policyFS(`decision := {"allow": true}`))
	in := execInput("/usr/bin/git", "log", "--oneline", "-n", "5")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Decide(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideQuota is BenchmarkDecide with config.quotas naming Exec
// (quotas.rego adds a quota to every call): the policy side of what
// quotas cost (docs/performance.md#quotas).
func BenchmarkDecideQuota(b *testing.B) {
	for _, tc := range []struct {
		name   string
		quotas string
	}{{"none", ""}, {"exec", `[{"tool": "Exec", "limit": 1000000, "window_s": 3600}]`}} {
		b.Run(tc.name, func(b *testing.B) {
			e := loaded(b, withQuotas(b, tc.quotas))
			in := execInput("/usr/bin/git", "log", "--oneline", "-n", "5")
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, err := e.Decide(ctx, in)
				if err != nil || !d.Allow || (tc.quotas != "") != (len(d.Quotas) == 1) {
					b.Fatalf("Decide = %+v, %v", d, err)
				}
			}
		})
	}
}

// withQuotas is the shipped bundle with config.quotas set (raw JSON; ""
// leaves it unset).
func withQuotas(b *testing.B, quotas string) fs.FS {
	b.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(Shipped(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(Shipped(), p)
		if err != nil {
			return err
		}
		if p == "data.json" && quotas != "" {
			var v map[string]any
			if err := json.Unmarshal(data, &v); err != nil {
				return err
			}
			var q any
			if err := json.Unmarshal([]byte(quotas), &q); err != nil {
				return err
			}
			v["portcullis"].(map[string]any)["config"].(map[string]any)["quotas"] = q
			if data, err = json.Marshal(v); err != nil {
				return err
			}
		}
		m[p] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return m
}
