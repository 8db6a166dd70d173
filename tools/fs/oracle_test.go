package fstool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoHostPathOracle: an agent that can plant symlinks in its writable
// grant, or name any absolute path, learns nothing about the host outside
// its grants. Each pair below differs only in whether the host file
// exists (or where a link leads); both get the same code and the same
// words, the names in the pair aside, and no message says where a path
// resolves.
func TestNoHostPathOracle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	must(t, os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.work, "to-a")))
	must(t, os.Symlink(filepath.Join(f.outside, "missing.txt"), filepath.Join(f.work, "to-b")))
	must(t, os.Symlink(filepath.Join(f.outside, "secret.txt"), filepath.Join(f.outside, "host-a")))
	must(t, os.Symlink(filepath.Join(f.outside, "gone"), filepath.Join(f.outside, "host-b")))
	w, o := f.work, f.outside
	pairs := [][2]string{
		{w + "/to-a", w + "/to-b"},                          // planted link: existing vs missing target
		{w + "/to-a/x", w + "/to-b/x"},                      // through the planted link
		{o + "/secret.txt", o + "/nothing.txt"},             // host file: exists vs not
		{o + "/host-a", o + "/host-b"},                      // host link: resolves vs dangles
		{o + "/secret.txt", o + "/host-b"},                  // host file vs dangling host link
		{"/etc/passwd", "/etc/portcullis-no-such-file"},     // system file vs none
		{"/etc/passwd/x", "/etc/portcullis-no-such-file/x"}, // through a file vs through nothing
	}
	for _, tool := range []string{NameRead, NameWrite, NameList} {
		for _, pair := range pairs {
			var msgs [2]string
			var codes [2]string
			for i, p := range pair {
				in := `{"path":` + quote(p) + `}`
				if tool == NameWrite {
					in = `{"path":` + quote(p) + `,"content":"x"}`
				}
				res := f.do(t, tool, in)
				if res.err == nil {
					t.Fatalf("%s %s succeeded", tool, p)
				}
				codes[i] = string(res.code)
				msgs[i] = strings.ReplaceAll(res.err.Message, p, "PATH")
				for _, name := range []string{"to-a", "to-b", "host-a", "host-b"} {
					msgs[i] = strings.ReplaceAll(msgs[i], name, "NAME")
				}
				for _, leak := range []string{"secret.txt", "missing.txt", "gone", "symlink to /", "does not resolve", "does not exist"} {
					if strings.Contains(msgs[i], leak) {
						t.Errorf("%s %s: the message tells about the host (%q): %s", tool, p, leak, res.err.Message)
					}
				}
			}
			if codes[0] != codes[1] || msgs[0] != msgs[1] {
				t.Errorf("%s tells %s from %s:\n  %s %q\n  %s %q", tool, pair[0], pair[1], codes[0], msgs[0], codes[1], msgs[1])
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "secret.txt")); string(b) != secret {
		t.Error("outside/secret.txt changed")
	}
}
