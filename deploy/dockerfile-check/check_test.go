package main

import (
	"os"
	"strings"
	"testing"
)

// TestProjectDockerfile: the shipped Dockerfile passes.
func TestProjectDockerfile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p := Check(f); len(p) > 0 {
		t.Errorf("Dockerfile problems:\n%s", strings.Join(p, "\n"))
	}
}

// TestCheckCatches: each promise broken in a copy of the shipped
// Dockerfile is reported, so the check is not vacuous.
func TestCheckCatches(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	orig := string(b)
	cut := func(from, to string) string { // drop the lines from..to (inclusive)
		i := strings.Index(orig, from)
		j := strings.Index(orig[i:], to)
		if i < 0 || j < 0 {
			t.Fatalf("the Dockerfile no longer holds %q .. %q", from, to)
		}
		end := i + j + len(to)
		return orig[:i] + orig[end:]
	}
	for _, tc := range []struct {
		name, dockerfile, want string
	}{
		{"no healthcheck", cut("HEALTHCHECK", "200 '* ]]\"]\n"), "no HEALTHCHECK"},
		{"healthcheck none", strings.Replace(cut("HEALTHCHECK", "200 '* ]]\"]\n"), "STOPSIGNAL", "HEALTHCHECK NONE\nSTOPSIGNAL", 1), "HEALTHCHECK NONE"},
		{"no bubblewrap", strings.Replace(orig, "bubblewrap ca-certificates", "ca-certificates", 1), "bubblewrap"},
		{"root user", strings.Replace(orig, "USER 10001:10001", "USER root", 1), "runs as root"},
		{"no user", strings.Replace(orig, "USER 10001:10001\n", "", 1), "runs as root"},
		{"one stage", "FROM debian:trixie-slim\nRUN apt-get update && apt-get install -y bubblewrap\n", "multi-stage"},
		{"helper elsewhere", strings.Replace(orig, "COPY --from=build /out/gateway /out/portcullis-exec-helper /usr/local/bin/",
			"COPY --from=build /out/gateway /usr/local/bin/\nCOPY --from=build /out/portcullis-exec-helper /opt/", 1), "one directory"},
		{"lint: casing", strings.Replace(orig, "FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build", "FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} as build", 1), "FromAsCasing"},
		{"syntax", orig + "\nHEALTHCHECK --interval=nope CMD true\n", "instructions"},
	} {
		p := Check(strings.NewReader(tc.dockerfile))
		if !strings.Contains(strings.Join(p, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", tc.name, p, tc.want)
		}
	}
}
