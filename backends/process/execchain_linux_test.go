package process

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// elfInterpreterReference is what elfInterpreter answered before it read
// only the program headers: debug/elf's full parse.
func elfInterpreterReference(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, min(p.Filesz, 4096))
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}

// TestElfInterpreterAgreesWithDebugElf: on real programs and libraries,
// scripts, truncated and corrupt files, the program-header reader finds
// the interpreter debug/elf finds (or, for a file debug/elf cannot parse,
// nothing or the same).
func TestElfInterpreterAgreesWithDebugElf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	realTrue, err := filepath.EvalSymlinks("/usr/bin/true")
	if err != nil {
		t.Skip("no /usr/bin/true")
	}
	trueBytes, err := os.ReadFile(realTrue)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		path string
		want string // "" means: whatever debug/elf says
	}{
		{"dynamic program", realTrue, ""},
		{"shell", "/bin/sh", ""},
		{"dynamic loader", "/lib64/ld-linux-x86-64.so.2", ""},
		{"script", write("script", []byte("#!/bin/sh\necho hi\n")), ""},
		{"empty", write("empty", nil), ""},
		{"magic only", write("magic", []byte("\x7fELF")), ""},
		{"header only", write("header", trueBytes[:64]), ""},
		{"truncated in the program headers", write("trunc", trueBytes[:100]), ""},
		{"garbage", write("garbage", bytes.Repeat([]byte{0xff}, 4096)), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(tc.path); err != nil {
				t.Skipf("%s: %v", tc.path, err)
			}
			got, want := elfInterpreter(tc.path), elfInterpreterReference(tc.path)
			if got != want {
				t.Errorf("%s: interpreter %q, debug/elf says %q", tc.path, got, want)
			}
		})
	}
	// A dynamic program has one: the comparison above is not vacuous.
	if elfInterpreter(realTrue) == "" {
		t.Errorf("%s: no interpreter found", realTrue)
	}
}

// TestShebangSkipsBinaries: a file that does not start with #! has no
// shebang interpreter, whatever lines follow; a script has its own.
func TestShebangSkipsBinaries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, content, interp, arg string
	}{
		{"env script", "#!/usr/bin/env python3\nprint(1)\n", "/usr/bin/env", "python3"},
		{"sh script", "#!/bin/sh -e\n", "/bin/sh", ""},
		{"binary with a later #! line", "\x7fELF\n#!/bin/sh\n", "", ""},
		{"one byte", "#", "", ""},
		{"relative interpreter", "#!sh\n", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.content), 0o755); err != nil {
				t.Fatal(err)
			}
			if interp, arg := shebang(p); interp != tc.interp || arg != tc.arg {
				t.Errorf("shebang = %q %q, want %q %q", interp, arg, tc.interp, tc.arg)
			}
		})
	}
}
