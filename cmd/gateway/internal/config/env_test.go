package config

import (
	"reflect"
	"slices"
	"testing"
)

func TestKnownEnvCoversApplyEnv(t *testing.T) {
	t.Parallel()
	known := KnownEnv()
	for _, want := range []string{"PORTCULLIS_LISTEN", "PORTCULLIS_POLICY_BUNDLE", "PORTCULLIS_AUTH_JWT_JWKS_URL", "PORTCULLIS_PRINCIPALS", "PORTCULLIS_CONFIG"} {
		if !slices.Contains(known, want) {
			t.Errorf("KnownEnv lacks %s", want)
		}
	}
	// Every name KnownEnv lists as a config key is one ApplyEnv reads:
	// set to junk, it either changes the config (a string key) or is
	// refused (any other type).
	for _, name := range known {
		if slices.Contains(otherEnv, name) {
			continue
		}
		cfg := Default()
		err := ApplyEnv(&cfg, []string{name + "=junk: ["})
		if err == nil && reflect.DeepEqual(cfg, Default()) {
			t.Errorf("%s: ApplyEnv neither read nor refused it", name)
		}
	}
}

func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		environ []string
		want    []UnknownVar
	}{
		{"typo gets the nearest name", []string{"PORTCULLIS_LISTN=:1"}, []UnknownVar{{"PORTCULLIS_LISTN", "PORTCULLIS_LISTEN"}}},
		{"nested typo", []string{"PORTCULLIS_POLICY_BUNDEL=x"}, []UnknownVar{{"PORTCULLIS_POLICY_BUNDEL", "PORTCULLIS_POLICY_BUNDLE"}}},
		{"far from anything: no suggestion", []string{"PORTCULLIS_SOMETHING_ELSE_ENTIRELY=1"}, []UnknownVar{{"PORTCULLIS_SOMETHING_ELSE_ENTIRELY", ""}}},
		{"known config keys pass", []string{"PORTCULLIS_LISTEN=:1", "PORTCULLIS_EVIDENCE_RETENTION=30d", "PORTCULLIS_DATA_DIR=/x"}, nil},
		{"gateway and SDK variables pass", []string{"PORTCULLIS_CONFIG=/c", "PORTCULLIS_DENO=/d", "PORTCULLIS_URL=u", "PORTCULLIS_API_KEY=k"}, nil},
		{"test knobs pass", []string{"PORTCULLIS_TEST_DATABASE_URL=x", "PORTCULLIS_REQUIRE_BWRAP=1"}, nil},
		{"other prefixes are not ours", []string{"LISTEN=1", "PORTCULLISX=1", "OTEL_SDK_DISABLED=true"}, nil},
		{"sorted", []string{"PORTCULLIS_ZZ=1", "PORTCULLIS_AA=1"}, []UnknownVar{{"PORTCULLIS_AA", ""}, {"PORTCULLIS_ZZ", ""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := UnknownEnv(tc.environ)
			if !slices.Equal(got, tc.want) {
				t.Errorf("UnknownEnv(%q) = %+v, want %+v", tc.environ, got, tc.want)
			}
		})
	}
}
