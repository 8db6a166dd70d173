// Command breakout tries one forbidden operation inside the sandbox and
// prints "blocked <errno>" or "allowed"; the bwrap tests build and run it.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	var err error
	switch os.Args[1] {
	case "tiocsti":
		c := byte('x')
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		err = errno(e)
	case "tiocsti-high":
		// The request with junk in the high 32 bits: the kernel truncates it.
		c := byte('x')
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, 0xdead00000000|syscall.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		err = errno(e)
	case "unix":
		var fd int
		fd, err = syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err == nil {
			syscall.Close(fd)
		}
	case "unix-dgram":
		var fd int
		fd, err = syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
		if err == nil {
			syscall.Close(fd)
		}
	case "socketpair":
		_, err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	case "socketpair-stream":
		var fds [2]int
		fds, err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
		}
	case "inet":
		var fd int
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
		if err == nil {
			syscall.Close(fd)
		}
	case "io_uring":
		params := make([]byte, 120)
		_, _, e := syscall.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params[0])), 0)
		err = errno(e)
	case "bpf":
		_, _, e := syscall.Syscall(unix.SYS_BPF, 0, 0, 0)
		err = errno(e)
	case "ptrace":
		_, _, e := syscall.Syscall(syscall.SYS_PTRACE, syscall.PTRACE_ATTACH, 1, 0)
		err = errno(e)
	case "unshare-user":
		err = syscall.Unshare(syscall.CLONE_NEWUSER)
	case "unshare-net":
		err = syscall.Unshare(syscall.CLONE_NEWNET)
	case "mount":
		err = syscall.Mount("none", "/tmp", "tmpfs", 0, "")
	case "keyctl":
		_, _, e := syscall.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
		err = errno(e)
	case "x32":
		// getpid through the x32 ABI.
		if runtime.GOARCH != "amd64" {
			fmt.Println("blocked (no x32 on " + runtime.GOARCH + ")")
			return
		}
		_, _, e := syscall.Syscall(0x40000000|39, 0, 0, 0)
		err = errno(e)
	default:
		fmt.Println("unknown test", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Printf("blocked %v\n", err)
		return
	}
	fmt.Println("allowed")
}

func errno(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
