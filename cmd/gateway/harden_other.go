//go:build !linux

package main

// nonDumpable has no equivalent here: the process backend does not run
// outside Linux, and seatbelt's profile keeps programs from the gateway.
func nonDumpable() error { return nil }
