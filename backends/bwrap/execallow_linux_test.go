package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/backends/process"
	"github.com/portcullis/portcullis/wire"
)

// TestExecAllowInsideSandbox: a spec's exec restriction holds inside the
// sandbox, for every network posture (allowlist starts bwrap from a thread
// that first enters the call's network namespace): the program runs, but
// what it tries to execute, directly or from a child, is refused, while the
// unrestricted control proves the same command runs there.
func TestExecAllowInsideSandbox(t *testing.T) {
	requireBwrap(t)
	if process.LandlockABI() < 1 {
		t.Skip("no Landlock on this kernel")
	}
	t.Parallel()
	f := newFixture(t)
	for _, posture := range []string{wire.PostureOff, wire.PostureAllowlist} {
		for _, restricted := range []bool{false, true} {
			proof := filepath.Join(f.rw, posture+"-"+map[bool]string{true: "restricted", false: "control"}[restricted])
			s := spec(f.scope(posture), "/bin/sh", "-c", `/usr/bin/touch "$0"; ( /usr/bin/touch "$0.2" ); echo shell-ran`, proof)
			if restricted {
				s.ExecAllow = process.ExecChain("/bin/sh")
			}
			res, err := f.runner().Run(context.Background(), s)
			if err != nil {
				t.Fatalf("%s restricted=%v: %v", posture, restricted, err)
			}
			if !strings.Contains(res.Stdout, "shell-ran") {
				t.Fatalf("%s restricted=%v: the program did not run: %+v", posture, restricted, res)
			}
			for _, p := range []string{proof, proof + ".2"} {
				_, statErr := os.Stat(p)
				if ran := statErr == nil; ran == restricted {
					t.Errorf("%s restricted=%v: %s exists = %v (stderr %q)", posture, restricted, filepath.Base(p), ran, res.Stderr)
				}
			}
		}
	}
}
