package seatbelt

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis/portcullis/backends/sandbox"
	"github.com/portcullis/portcullis/wire"
)

var update = flag.Bool("update", false, "rewrite golden files")

func profile(posture string) sandbox.Profile {
	return sandbox.Profile{
		ReadOnly:  []string{"/Users/dev/data"},
		ReadWrite: []string{"/Users/dev/work"},
		DenyFiles: []string{"/Users/dev/work/.env"},
		DenyDirs:  []string{"/Users/dev/work/.ssh"},
		Network:   wire.Network{Posture: posture, Allow: []string{"api.github.com:443"}},
		Home:      "/private/tmp/portcullis-home-1",
	}
}

// TestGenerateGolden pins the profile of every posture.
func TestGenerateGolden(t *testing.T) {
	t.Parallel()
	for _, posture := range []string{wire.PostureOff, wire.PostureAllowlist, wire.PostureFull} {
		t.Run(posture, func(t *testing.T) {
			t.Parallel()
			got, err := Generate(profile(posture), Options{ProxyPort: 3128, TempDirs: []string{"/private/tmp/portcullis-sb-1"}})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", posture+".sb")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("profile differs from %s (run with -update after review):\n%s", path, got)
			}
			// The deny overlay must come after every allow: SBPL's last match wins.
			deny := strings.Index(got, "(deny file-read* file-write*")
			if deny < 0 || strings.LastIndex(got, "(allow file-") > deny {
				t.Errorf("deny overlays do not follow the file allows")
			}
			if posture != wire.PostureFull && !strings.Contains(got, "(deny network*)") {
				t.Errorf("posture %s does not deny the network", posture)
			}
		})
	}
}

func TestGenerateRefuses(t *testing.T) {
	t.Parallel()
	if _, err := Generate(profile(wire.PostureAllowlist), Options{}); err == nil {
		t.Error("allowlist without a proxy port was accepted")
	}
	if _, err := Generate(profile("sideways"), Options{}); err == nil {
		t.Error("unknown posture was accepted")
	}
}

// TestQuoteCannotInject: a hostile path cannot close the string literal.
func TestQuoteCannotInject(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		`/a"b`:         `"/a\"b"`,
		`/a\`:          `"/a\\"`,
		"/a\n(allow)":  `"/a\x0a(allow)"`,
		`/a") (allow `: `"/a\") (allow "`,
	}
	for in, want := range tests {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
	p := profile(wire.PostureOff)
	p.ReadWrite = []string{`/x") (allow default) ("`}
	got, err := Generate(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, `(allow default)`+"\n") || strings.Contains(got, `") (allow default) ("`+")") {
		t.Errorf("injection survived:\n%s", got)
	}
}
