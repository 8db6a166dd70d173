package evidence

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/portcullis/portcullis/wire"
)

// The writer keeps its own copy of an event's scope and outcome, as they
// will read back from the store: the caller may reuse its values, and the
// content digest must be the one a verifier computes from the stored JSON.
// These copies are what a JSON round trip (json.Marshal, json.Unmarshal)
// gives — every string as encoding/json writes it, each invalid UTF-8 byte
// a U+FFFD — without the round trip's cost (TestCopyMatchesJSONRoundTrip
// holds them to it).

// jsonString is s as a JSON round trip returns it.
func jsonString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

func jsonStrings(in []string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = jsonString(s)
	}
	return out
}

func copyScope(in *wire.Scope) *wire.Scope {
	s := &wire.Scope{
		Network:  wire.Network{Posture: jsonString(in.Network.Posture), Allow: jsonStrings(in.Network.Allow)},
		EnvNames: jsonStrings(in.EnvNames),
		Limits:   in.Limits,
		Backend:  jsonString(in.Backend),
		FSDeny:   jsonStrings(in.FSDeny),
	}
	if in.FSGrants != nil {
		s.FSGrants = make([]wire.FSGrant, len(in.FSGrants))
		for i, g := range in.FSGrants {
			s.FSGrants[i] = wire.FSGrant{Path: jsonString(g.Path), Mode: jsonString(g.Mode), Alias: jsonString(g.Alias), AllowAutorun: g.AllowAutorun}
		}
	}
	return s
}

func copyOutcome(in *wire.Outcome) (*wire.Outcome, error) {
	o := &wire.Outcome{
		Status: jsonString(in.Status), OutputSHA256: jsonString(in.OutputSHA256),
		DurationMS: in.DurationMS, Backend: jsonString(in.Backend),
	}
	if in.ErrorCode != nil {
		c := jsonString(*in.ErrorCode)
		o.ErrorCode = &c
	}
	if in.ExitCode != nil {
		c := *in.ExitCode
		o.ExitCode = &c
	}
	if in.Time != nil {
		t := *in.Time
		if y := t.Year(); y < 0 || y > 9999 {
			return nil, fmt.Errorf("time %v: year outside [0,9999] cannot be written as RFC 3339", y)
		}
		// What time.Time.UnmarshalJSON returns: the instant, no monotonic
		// reading, in UTC or a fixed zone of the written offset.
		t = t.Round(0)
		if _, off := t.Zone(); off == 0 {
			t = t.UTC()
		} else {
			t = t.In(time.FixedZone("", off))
		}
		o.Time = &t
	}
	if in.Network != nil {
		n := &wire.NetworkStats{
			Connections: in.Network.Connections, Allowed: jsonStrings(in.Network.Allowed), Refused: jsonStrings(in.Network.Refused),
			BytesOut: in.Network.BytesOut, BytesIn: in.Network.BytesIn,
		}
		if in.Network.Denials != nil {
			// encoding/json writes keys sorted; when two keys read back
			// alike, the later one wins.
			n.Denials = make(map[string]string, len(in.Network.Denials))
			keys := make([]string, 0, len(in.Network.Denials))
			for k := range in.Network.Denials {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				n.Denials[jsonString(k)] = jsonString(in.Network.Denials[k])
			}
		}
		o.Network = n
	}
	return o, nil
}
