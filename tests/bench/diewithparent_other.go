//go:build !linux

package main

import "syscall"

// dieWithParent: no parent-death signal outside Linux; the server is
// stopped by the cleanup only.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{}
}
