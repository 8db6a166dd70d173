package process

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Exec restriction. A call whose spec names ExecAllow may start no program
// but those: a Landlock ruleset that handles only LANDLOCK_ACCESS_FS_EXECUTE
// is put on the process before it execs the target, and the kernel then
// refuses every execve (and the ELF interpreter it would load) outside the
// allowed files and directories, for the target and everything it starts.
// This is what makes a read-only program safe against a working tree that
// configures it to run commands: git runs a repository's filter drivers,
// fsmonitor hook, gpg.program and hooks by executing them, and under the
// restriction each of those executions fails with EACCES whatever the
// repository's configuration says. Code a program loads into itself (a
// Python import, a Ruby require) is not an execution; profiles close those
// doors with flags (python3 -I) or refuse the shape.

// LandlockABI is the kernel's Landlock ABI version, 0 when Landlock is not
// available (kernel older than 5.13, or Landlock not enabled at boot).
func LandlockABI() int {
	landlockOnce.Do(func() {
		v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
		if errno == 0 {
			landlockABI = int(v)
		}
	})
	return landlockABI
}

var (
	landlockOnce sync.Once
	landlockABI  int
)

// ErrNoLandlock means an exec restriction was asked for on a kernel without
// Landlock: the call must not run unrestricted.
var ErrNoLandlock = errors.New("process: the program's exec restriction needs Landlock, which this kernel does not offer")

// RestrictExec restricts the calling thread, and every process it starts
// afterwards, to executing the files in allow and the files beneath the
// directories in allow. It must run on a locked OS thread (LockOSThread)
// that then makes the exec itself and is never returned to the scheduler:
// Landlock binds the thread, not the process, and the restriction cannot
// be lifted. Paths that do
// not exist are skipped; an empty allow list permits no execution at all.
// It sets no_new_privs first when the thread lacks CAP_SYS_ADMIN, as the
// kernel requires.
func RestrictExec(allow []string) error {
	if LandlockABI() < 1 {
		return ErrNoLandlock
	}
	attr := struct{ handledAccessFS uint64 }{unix.LANDLOCK_ACCESS_FS_EXECUTE}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("process: landlock_create_ruleset: %w", errno)
	}
	ruleset := int(fd)
	defer unix.Close(ruleset)
	for _, p := range allow {
		pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("process: exec restriction: opening %s: %w", p, err)
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: unix.LANDLOCK_ACCESS_FS_EXECUTE, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		_ = unix.Close(pfd)
		if errno != 0 {
			return fmt.Errorf("process: exec restriction: allowing %s: %w", p, errno)
		}
	}
	_, _, errno = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0)
	if errno == unix.EPERM {
		// Without CAP_SYS_ADMIN the kernel wants no_new_privs, which is
		// harmless here: nothing a restricted program starts should gain
		// privileges anyway.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("process: exec restriction: no_new_privs: %w", err)
		}
		_, _, errno = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(ruleset), 0, 0)
	}
	if errno != 0 {
		return fmt.Errorf("process: landlock_restrict_self: %w", errno)
	}
	return nil
}

// ExecChain is what must be executable for path itself to run: its real
// path, its ELF interpreter (the dynamic loader, which the kernel opens for
// execution too), and for a script the interpreter its #! line names, that
// interpreter's own chain and, for "#!/usr/bin/env NAME", NAME looked up in
// BasePath. Missing pieces are left out: the exec then fails, closed.
func ExecChain(path string) []string { return ExecChainVisiting(path, nil) }

// ExecChainVisiting is ExecChain, telling visit (when not nil) every path
// it resolves or looks up, before it does: the answer depends on where
// those lead and on the contents of the files in the answer, nothing else
// (exectool remembers answers on that basis).
func ExecChainVisiting(path string, visit func(p string)) []string {
	var out []string
	seen := map[string]bool{}
	// loader: p is an ELF program's PT_INTERP. The kernel maps it and
	// reads neither its own PT_INTERP nor a #! line in it (a loader must
	// be ELF), so nothing past it belongs in the chain: following it would
	// let a program in a writable grant, with a loader of its own naming
	// any host program, add that program to the allow list.
	var add func(p string, depth int, loader bool)
	add = func(p string, depth int, loader bool) {
		if visit != nil {
			visit(p)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] || depth > 4 {
			return
		}
		seen[real] = true
		out = append(out, real)
		if loader {
			return
		}
		if interp := elfInterpreter(real); interp != "" {
			// A relative PT_INTERP is opened by the kernel from the
			// program's working directory, not the gateway's: it is
			// left out (the exec then fails, closed).
			if filepath.IsAbs(interp) {
				add(interp, depth+1, true)
			}
			return
		}
		interp, arg := shebang(real)
		if interp == "" {
			return
		}
		add(interp, depth+1, false)
		if arg != "" && hostEnv(interp, visit) {
			for _, dir := range filepath.SplitList(BasePath) {
				if visit != nil {
					visit(filepath.Join(dir, arg))
				}
				if fi, err := os.Stat(filepath.Join(dir, arg)); err == nil && fi.Mode().IsRegular() {
					add(filepath.Join(dir, arg), depth+1, false)
					break
				}
			}
		}
	}
	add(path, 0, false)
	return out
}

// hostEnv reports whether interp is the host's env (/usr/bin/env or
// /bin/env, links resolved): only that env is known to run the NAME of a
// "#!/usr/bin/env NAME" line; a program merely named env (one in a
// writable grant) runs whatever it likes, and must not bring NAME into the
// allow list.
func hostEnv(interp string, visit func(p string)) bool {
	if filepath.Base(interp) != "env" {
		return false
	}
	real, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return false
	}
	for _, e := range []string{"/usr/bin/env", "/bin/env"} {
		if visit != nil {
			visit(e)
		}
		if r, err := filepath.EvalSymlinks(e); err == nil && r == real {
			return true
		}
	}
	return false
}

// BasePath is the PATH Exec gives every program (exectool.BasePath); env
// looks interpreters up in it.
const BasePath = "/usr/local/bin:/usr/bin:/bin"

// elfInterpreter is the PT_INTERP of an ELF file, "" for anything else.
// It reads what the kernel reads to find it (the ELF header and the
// program headers), not the section headers debug/elf.Open parses too:
// that was half the CPU of an Exec dry run on the shipped policy
// (docs/performance.md). A file the kernel would not load either way is
// "" here (the exec then fails, closed).
func elfInterpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var ident [elf.EI_NIDENT]byte
	if _, err := f.ReadAt(ident[:], 0); err != nil || string(ident[:4]) != elf.ELFMAG {
		return ""
	}
	var order binary.ByteOrder
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return ""
	}
	// Where the program headers are, and each one's type, offset and size.
	var phoff uint64
	var phentsize, phnum uint16
	var read func(ph []byte) (typ uint32, off, size uint64)
	switch elf.Class(ident[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		var h elf.Header64
		if err := binary.Read(io.NewSectionReader(f, 0, int64(binary.Size(h))), order, &h); err != nil {
			return ""
		}
		phoff, phentsize, phnum = h.Phoff, h.Phentsize, h.Phnum
		if int(phentsize) != binary.Size(elf.Prog64{}) {
			return ""
		}
		read = func(ph []byte) (uint32, uint64, uint64) {
			return order.Uint32(ph[0:]), order.Uint64(ph[8:]), order.Uint64(ph[32:])
		}
	case elf.ELFCLASS32:
		var h elf.Header32
		if err := binary.Read(io.NewSectionReader(f, 0, int64(binary.Size(h))), order, &h); err != nil {
			return ""
		}
		phoff, phentsize, phnum = uint64(h.Phoff), h.Phentsize, h.Phnum
		if int(phentsize) != binary.Size(elf.Prog32{}) {
			return ""
		}
		read = func(ph []byte) (uint32, uint64, uint64) {
			return order.Uint32(ph[0:]), uint64(order.Uint32(ph[4:])), uint64(order.Uint32(ph[16:]))
		}
	default:
		return ""
	}
	// The kernel's limits (load_elf_phdrs): program headers of exactly
	// the native size (checked above), at most 64 KiB of them.
	if phnum == 0 || int(phentsize)*int(phnum) > 65536 || phoff > 1<<40 {
		return ""
	}
	phs := make([]byte, int(phentsize)*int(phnum))
	if _, err := f.ReadAt(phs, int64(phoff)); err != nil {
		return ""
	}
	for i := range int(phnum) {
		typ, off, size := read(phs[i*int(phentsize):])
		if elf.ProgType(typ) != elf.PT_INTERP {
			continue
		}
		// The kernel takes the first PT_INTERP, refuses one shorter than
		// 2 or longer than PATH_MAX bytes or not ending in NUL, and opens
		// the name up to its first NUL (load_elf_binary).
		if off > 1<<40 || size < 2 || size > unix.PathMax {
			return ""
		}
		b := make([]byte, size)
		if _, err := f.ReadAt(b, int64(off)); err != nil || b[size-1] != 0 {
			return ""
		}
		name, _, _ := bytes.Cut(b, []byte{0})
		return string(name)
	}
	return ""
}

// shebang is a script's #! interpreter and its first argument, if any.
func shebang(path string) (interp, arg string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	// Most programs are not scripts: two bytes say so, before a line
	// reader would read through a binary to its first newline.
	var magic [2]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != "#!" {
		return "", ""
	}
	line, err := bufio.NewReaderSize(f, 256).ReadString('\n')
	if err != nil && line == "" {
		return "", ""
	}
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return "", ""
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return "", ""
	}
	if len(fields) > 1 && !strings.HasPrefix(fields[1], "-") {
		arg = fields[1]
	}
	return fields[0], arg
}
