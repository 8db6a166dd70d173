package evidence

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portcullis/portcullis/wire"
)

// roundTrip is what copyScope and copyOutcome stand for.
func roundTrip[T any](in *T) (*T, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	var out T
	return &out, json.Unmarshal(b, &out)
}

// TestCopyMatchesJSONRoundTrip: the writer's copies encode exactly as a
// JSON round trip of the same value, for random values whose strings mix
// ASCII, multi-byte runes, JSON-escaped characters and invalid UTF-8 — so
// an event's digest is the one a verifier computes from the stored JSON.
func TestCopyMatchesJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 11))
	pieces := []string{"a", "/usr", "é", "😀", "\u2028", "<&>", `"`, `\`, "\x00", "\xff", "\xed\xa0\x80", "\xe2\x82", "\xf0\x9f", "k", " "}
	str := func() string {
		var b bytes.Buffer
		for range r.IntN(6) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	strs := func() []string {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+r.IntN(3))
		for i := range out {
			out[i] = str()
		}
		return out
	}
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("x", 5*3600+1800), time.FixedZone("", -7*3600)}
	for i := range 20000 {
		sc := &wire.Scope{
			Network:  wire.Network{Posture: str(), Allow: strs()},
			EnvNames: strs(), Backend: str(), FSDeny: strs(),
			Limits: wire.Limits{TimeoutS: r.IntN(100), MemoryBytes: r.Int64()},
		}
		if r.IntN(3) > 0 {
			for range r.IntN(3) {
				sc.FSGrants = append(sc.FSGrants, wire.FSGrant{Path: str(), Mode: str(), Alias: str(), AllowAutorun: r.IntN(2) == 0})
			}
		}
		o := &wire.Outcome{Status: str(), OutputSHA256: str(), DurationMS: r.Int64N(1e6), Backend: str()}
		if r.IntN(2) == 0 {
			c := str()
			o.ErrorCode = &c
		}
		if r.IntN(2) == 0 {
			c := r.IntN(256) - 128
			o.ExitCode = &c
		}
		if r.IntN(2) == 0 {
			tm := time.Unix(r.Int64N(4e9), r.Int64N(1e9)).In(zones[r.IntN(len(zones))])
			if r.IntN(2) == 0 {
				tm = time.Now() // with a monotonic reading
			}
			o.Time = &tm
		}
		if r.IntN(2) == 0 {
			o.Network = &wire.NetworkStats{Connections: r.IntN(9), Allowed: strs(), Refused: strs(), BytesIn: r.Int64()}
			if r.IntN(2) == 0 {
				o.Network.Denials = map[string]string{}
				for range r.IntN(4) {
					o.Network.Denials[str()] = str()
				}
			}
		}
		wantS, err := roundTrip(sc)
		if err != nil {
			t.Fatal(err)
		}
		wantO, err := roundTrip(o)
		if err != nil {
			t.Fatal(err)
		}
		gotO, err := copyOutcome(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ got, want any }{{copyScope(sc), wantS}, {gotO, wantO}} {
			g, _ := json.Marshal(c.got)
			w, _ := json.Marshal(c.want)
			if !bytes.Equal(g, w) {
				t.Fatalf("case %d: copy encodes as\n%s\nround trip as\n%s", i, g, w)
			}
		}
	}
}

// TestCopyIsDeep: the copies share nothing the caller could change later.
func TestCopyIsDeep(t *testing.T) {
	t.Parallel()
	code, exit, tm := "x", 3, time.Now()
	sc := &wire.Scope{FSGrants: []wire.FSGrant{{Path: "/a", Mode: "r"}}, Network: wire.Network{Allow: []string{"h"}}, EnvNames: []string{"A"}, FSDeny: []string{"/d"}}
	o := &wire.Outcome{ErrorCode: &code, ExitCode: &exit, Time: &tm, Network: &wire.NetworkStats{Allowed: []string{"a"}, Denials: map[string]string{"k": "v"}}}
	cs, co := copyScope(sc), must(copyOutcome(o))
	sc.FSGrants[0].Path, sc.Network.Allow[0], sc.EnvNames[0], sc.FSDeny[0] = "/z", "z", "Z", "/z"
	code, exit = "changed", 9
	o.Network.Allowed[0], o.Network.Denials["k"] = "z", "z"
	if cs.FSGrants[0].Path != "/a" || cs.Network.Allow[0] != "h" || cs.EnvNames[0] != "A" || cs.FSDeny[0] != "/d" {
		t.Errorf("scope copy changed with the original: %+v", cs)
	}
	if *co.ErrorCode != "x" || *co.ExitCode != 3 || co.Network.Allowed[0] != "a" || co.Network.Denials["k"] != "v" {
		t.Errorf("outcome copy changed with the original: %+v %+v", co, co.Network)
	}
	bad := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := copyOutcome(&wire.Outcome{Time: &bad}); err == nil {
		t.Error("an outcome time in year 10000 was accepted; JSON cannot hold it")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
