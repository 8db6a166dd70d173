package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestCLIConventions: every command answers -h and --help on stdout with
// exit 0; usage errors exit 2 naming the problem; --version names version,
// commit and Go.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	// Every command of the tree, found by walking it, answers both.
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() {
				walk(s, append(append([]string(nil), path...), s.Name()))
			}
		}
	}
	walk(newRootCmd(&bytes.Buffer{}), nil)
	if len(paths) < 20 {
		t.Fatalf("only %d commands in the tree: %v", len(paths), paths)
	}
	for _, p := range paths {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string(nil), p...), h)
			code, out, errOut := runArgs(t, args...)
			if code != 0 || !strings.Contains(out, "Usage:") || errOut != "" {
				t.Errorf("gateway %s: exit %d, stdout %q, stderr %q; want 0 and usage on stdout", strings.Join(args, " "), code, out, errOut)
			}
		}
	}
	cases := []struct {
		args      []string
		wantCode  int
		wantOut   string
		wantError string
	}{
		{[]string{"--version"}, 0, "commit ", ""},
		{[]string{"version"}, 0, "go go1.", ""},
		{nil, 2, "", "missing command"},
		{[]string{"bogus"}, 2, "", `unknown command "bogus"`},
		{[]string{"polcy"}, 2, "", `did you mean "policy"`},
		{[]string{"policy"}, 2, "", "gateway policy: missing command"},
		{[]string{"evidence", "hold", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"serve", "--no-such-flag"}, 2, "", "unknown flag: --no-such-flag"},
		{[]string{"serve", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"keys", "hash"}, 2, "", "want 1 argument"},
		{[]string{"keys", "signing-key"}, 2, "", "missing --output"},
		{[]string{"bundle", "build", "dir"}, 2, "", "missing --output"},
		{[]string{"policy", "eval"}, 2, "", "--input FILE is required"},
		{[]string{"evidence", "query", "--limit", "x"}, 2, "", `invalid argument "x"`},
		{[]string{"evidence", "hold", "release", "not-a-uuid"}, 2, "", "not a UUID"},
		{[]string{"keys", "hash", "abc"}, 0, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", ""},
		{[]string{"bundle", "inspect", "/nonexistent/bundle"}, 1, "", "gateway bundle inspect: "},
		{[]string{"policy", "schema", "no.such.tool"}, 1, "", `no tool "no.such.tool"`},
	}
	for _, tc := range cases {
		code, out, errOut := runArgs(t, tc.args...)
		if code != tc.wantCode || !strings.Contains(out, tc.wantOut) || !strings.Contains(errOut, tc.wantError) {
			t.Errorf("gateway %s: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.wantCode, tc.wantOut, tc.wantError)
		}
	}
}

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestUnknownEnvWarning: a misspelt variable is reported with the name
// meant, on every command; the command still runs.
func TestUnknownEnvWarning(t *testing.T) {
	t.Setenv("PORTCULLIS_LISTN", "127.0.0.1:1")
	code, out, errOut := runArgs(t, "keys", "hash", "abc")
	if code != 0 || out == "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if !strings.Contains(errOut, "PORTCULLIS_LISTN") || !strings.Contains(errOut, "did you mean PORTCULLIS_LISTEN") {
		t.Errorf("stderr %q: want a warning naming PORTCULLIS_LISTN and PORTCULLIS_LISTEN", errOut)
	}
}
