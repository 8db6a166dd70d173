package main

import "golang.org/x/sys/unix"

// nonDumpable marks the gateway non-dumpable (PR_SET_DUMPABLE 0): its
// /proc/<pid>/environ, mem, fd, maps and the like become root's, and
// ptrace needs CAP_SYS_PTRACE, so a program of the same user (the process
// backend under a non-root gateway) cannot read the environment the
// gateway was started with, its memory or its open files. It also means
// no core dumps. Execve resets the flag, so programs the gateway starts
// are not affected.
func nonDumpable() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
