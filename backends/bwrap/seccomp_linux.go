package bwrap

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp return actions (linux/seccomp.h).
const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retEPERM = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retKill  = unix.SECCOMP_RET_KILL_PROCESS
	// x32Bit marks x32-ABI syscall numbers on amd64.
	x32Bit = 0x40000000
)

// The filter is assembled here rather than with a policy builder such as
// github.com/elastic/go-seccomp-bpf (v1.6.0 evaluated): that builder sends
// a syscall made under a foreign architecture (i386 int 0x80 on amd64) to
// the policy's default action, which for this deny-list is allow, where
// this filter kills; and its argument conditions compare all 64 bits, so
// socket(1<<32|AF_UNIX) or ioctl(fd, 1<<32|TIOCSTI) would pass a check the
// kernel then defeats by truncating the argument to 32 bits. Both were
// confirmed by running its assembled program in golang.org/x/net/bpf's VM.

// Offsets into struct seccomp_data: nr, arch, then six 64-bit args. Only
// the low half of an argument is compared: the kernel truncates socket's
// domain and ioctl's request to 32 bits itself, so the high half cannot
// smuggle a blocked value past the filter.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
)

// blockedSyscalls fail with EPERM inside the sandbox. Most already need a
// capability the sandbox lacks; they are listed anyway so that a kernel
// bug in a capability check is not enough (io_uring and bpf have had many).
func blockedSyscalls() []uint32 {
	return []uint32{
		unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER, // IORING_OP_SOCKET etc. bypass seccomp
		unix.SYS_BPF,
		unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
		unix.SYS_PERF_EVENT_OPEN,
		unix.SYS_USERFAULTFD,
		unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
		unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_UNSHARE, unix.SYS_SETNS,
		unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
		unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
		unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_OPEN_BY_HANDLE_AT,
		unix.SYS_SYSLOG, unix.SYS_KEXEC_LOAD, unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	}
}

// nativeArch is the audit architecture of this build; the filter kills any
// syscall made under another (i386 via int 0x80 on amd64, for instance).
func nativeArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("bwrap: no seccomp filter for GOARCH %s", runtime.GOARCH)
}

// seccompProgram returns the filter as bpf instructions.
func seccompProgram() ([]bpf.Instruction, error) {
	arch, err := nativeArch()
	if err != nil {
		return nil, err
	}
	blocked := blockedSyscalls()
	// Layout, with forward jumps only:
	//   arch check; load nr; [x32 check]; one jeq per blocked nr -> EPERM;
	//   jeq socket -> SOCKET; jeq socketpair -> PAIR; jeq ioctl -> IOCTL;
	//   ALLOW; EPERM;
	//   SOCKET: load arg0; jeq AF_UNIX -> EPERM2; ALLOW;
	//   PAIR: load arg1; and type mask; jeq SOCK_STREAM -> ALLOW2 else EPERM2;
	//   IOCTL: load arg1; jeq TIOCSTI; jeq TIOCLINUX; EPERM2; ALLOW2.
	//
	// socketpair is allowed for SOCK_STREAM only: an anonymous connected
	// pair reaches nothing outside the sandbox, and runtimes need it (Deno's
	// tokio signal driver aborts without one); the DGRAM pairs of the
	// srt#343 filter bypass stay refused.
	var p []bpf.Instruction
	p = append(p,
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch, SkipTrue: 1},
		bpf.RetConstant{Val: retKill},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	)
	if runtime.GOARCH == "amd64" {
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: retEPERM},
		)
	}
	// n checks, then the socket, socketpair and ioctl jeqs, then ALLOW,
	// then EPERM.
	n := len(blocked)
	for i, nr := range blocked {
		// From check i, the EPERM return is (n-1-i) checks + 3 jeqs + ALLOW ahead.
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: uint8(n - 1 - i + 4)})
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKET, SkipTrue: 4},                // 0 -> SOCKET (5)
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SOCKETPAIR, SkipTrue: 6},            // 1 -> PAIR (8)
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_IOCTL, SkipTrue: 8},                 // 2 -> IOCTL (11)
		bpf.RetConstant{Val: retAllow},                                                    // 3 ALLOW
		bpf.RetConstant{Val: retEPERM},                                                    // 4 EPERM
		bpf.LoadAbsolute{Off: offArg0, Size: 4},                                           // 5 SOCKET
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 7},                   // 6 -> EPERM2 (14)
		bpf.RetConstant{Val: retAllow},                                                    // 7
		bpf.LoadAbsolute{Off: offArg1, Size: 4},                                           // 8 PAIR: type
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf},                                     // 9 drop SOCK_NONBLOCK|SOCK_CLOEXEC
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_STREAM, SkipTrue: 4, SkipFalse: 3}, // 10 -> ALLOW2 (15) / EPERM2 (14)
		bpf.LoadAbsolute{Off: offArg1, Size: 4},                                           // 11 IOCTL
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 1},                   // 12 -> EPERM2
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCLINUX, SkipFalse: 1},                // 13 -> EPERM2 or ALLOW2
		bpf.RetConstant{Val: retEPERM},                                                    // 14 EPERM2
		bpf.RetConstant{Val: retAllow},                                                    // 15 ALLOW2
	)
	return p, nil
}

// seccompFilter returns the filter as the struct sock_filter array bwrap
// reads from its --seccomp fd (native byte order).
func seccompFilter() ([]byte, error) { return seccompOnce() }

// seccompOnce assembles the filter once: it depends only on the
// architecture. Callers only read the bytes.
var seccompOnce = sync.OnceValues(assembleSeccomp)

func assembleSeccomp() ([]byte, error) {
	prog, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("bwrap: assembling the seccomp filter: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}
