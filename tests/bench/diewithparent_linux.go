package main

import "syscall"

// dieWithParent makes a started server die with this process (PDEATHSIG;
// Linux only).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
