package process

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// elfWithInterp is a minimal little-endian ELF64 executable header with one
// program header, a PT_INTERP whose bytes are interp (NUL included or not,
// as the caller writes it).
func elfWithInterp(interp string) []byte {
	const phoff, phentsize = 64, 56
	b := make([]byte, phoff+phentsize)
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le := binary.LittleEndian
	le.PutUint16(b[16:], uint16(elf.ET_EXEC))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[32:], phoff)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], phentsize)
	le.PutUint16(b[56:], 1)
	ph := b[phoff:]
	le.PutUint32(ph[0:], uint32(elf.PT_INTERP))
	le.PutUint64(ph[8:], uint64(len(b)))
	le.PutUint64(ph[32:], uint64(len(interp)))
	le.PutUint64(ph[40:], uint64(len(interp)))
	return append(b, interp...)
}

// TestExecChainFollowsWhatTheKernelFollows: the chain is what the kernel
// opens for execution, nothing more. It loads an ELF program's PT_INTERP as
// a loader and reads neither the loader's own PT_INTERP nor a #! line in
// it, so an attacker's program in a writable grant cannot bring any host
// program into the Landlock allow list through a loader naming it. A
// PT_INTERP the kernel refuses (no NUL at its end) or cuts (at its first
// NUL) names what the kernel would open, or nothing.
func TestExecChainFollowsWhatTheKernelFollows(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	elfLoader := write("elfloader", elfWithInterp(sh+"\x00"))
	scriptLoader := write("scriptloader", []byte("#!"+sh+"\n"))
	cases := []struct {
		name string
		prog []byte
		want []string // after the program itself
	}{
		{"loader naming a program", elfWithInterp(elfLoader + "\x00"), []string{elfLoader}},
		{"loader that is a script", elfWithInterp(scriptLoader + "\x00"), []string{scriptLoader}},
		{"interpreter without its NUL", elfWithInterp(sh), nil},
		{"interpreter cut at its first NUL", elfWithInterp(elfLoader + "\x00" + sh + "\x00"), []string{elfLoader}},
		{"empty interpreter", elfWithInterp(""), nil},
		{"relative interpreter (opened from the program's cwd)", elfWithInterp(strings.TrimPrefix(sh, "/") + "\x00"), nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := write("prog"+strconv.Itoa(i), tc.prog)
			want := append([]string{p}, tc.want...)
			if got := ExecChain(p); !slices.Equal(got, want) {
				t.Errorf("ExecChain = %v, want %v", got, want)
			}
		})
	}
}

// FuzzElfInterpreter: no file makes the program-header reader crash, hang
// or allocate without bound, and what it finds is a path the kernel would
// open: no NUL inside, at most PATH_MAX.
func FuzzElfInterpreter(f *testing.F) {
	f.Add(elfWithInterp("/lib64/ld-linux-x86-64.so.2\x00"))
	f.Add(elfWithInterp("/x"))
	f.Add([]byte("\x7fELF"))
	if b, err := os.ReadFile("/bin/sh"); err == nil && len(b) > 4096 {
		f.Add(b[:4096])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		tmp, err := os.CreateTemp(dir, "elf")
		if err != nil {
			t.Fatal(err)
		}
		p := tmp.Name()
		defer os.Remove(p)
		if _, err := tmp.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := tmp.Close(); err != nil {
			t.Fatal(err)
		}
		got := elfInterpreter(p)
		if strings.IndexByte(got, 0) >= 0 || len(got) >= 4096 {
			t.Errorf("interpreter %q", got)
		}
	})
}

// TestExecChainEnvIsTheHostsEnv: "#!/usr/bin/env NAME" brings NAME because
// the host's env runs it; a program of the caller's named env (in a
// writable grant) runs whatever it likes, so its #! line brings only itself
// and its own chain, never a host program it names.
func TestExecChainEnvIsTheHostsEnv(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	fake := filepath.Join(dir, "env")
	if err := os.WriteFile(fake, []byte("#!"+sh+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!"+fake+" true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	trueReal, err := filepath.EvalSymlinks("/usr/bin/true")
	if err != nil {
		t.Skip("no /usr/bin/true")
	}
	if got := ExecChain(script); slices.Contains(got, trueReal) {
		t.Errorf("ExecChain(#!%s true) = %v: brings %s", fake, got, trueReal)
	}
}
