//go:build unix

package seatbelt

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/portcullis/portcullis/backends/process"
	"golang.org/x/sys/unix"
)

// The helper protocol. macOS has no prlimit and no cgroups, so the limits
// of a call are set the portable way: the runner re-executes the gateway
// binary as
//
//	<gateway> __portcullis-seatbelt-helper v1 <cpu> <fsize> <nofile> -- <argv0> <args...>
//
// with the child's complete environment and a status pipe as fd 3. Each
// limit is "-" (leave as inherited) or "SOFT:HARD" in decimal. The helper
// sets the limits, reads them back, marks fd 3 close-on-exec, writes
// "ready\n" to it and execs argv0 (sandbox-exec, which then applies the
// profile and execs the program in the same process, so the limits hold
// for it and all it starts). On any failure it writes one line to fd 3 and
// stderr and exits HelperExitCode; the runner treats a status pipe that
// closes with anything but "ready\n" as a refusal, so a program never runs
// without its limits.
const (
	helperArg     = "__portcullis-seatbelt-helper"
	helperVersion = "v1"
	helperSep     = "--"
	statusFD      = 3
	statusReady   = process.HelperReady
	nLimits       = 3
)

// HelperExitCode is the exit status of a helper that refused to start.
const HelperExitCode = process.HelperExitCode

// limitResources are the limits in protocol order. RLIMIT_AS is not among
// them: macOS accepts it but does not enforce it, and a limit that is
// silently not applied must not be reported as applied.
var limitResources [nLimits]process.HelperLimit = process.HelperLimits

// MaybeRunHelper turns this process into the seatbelt helper when it was
// started as one and returns immediately otherwise. The gateway's main calls
// it first thing.
func MaybeRunHelper() {
	if len(os.Args) < 2 || os.Args[1] != helperArg {
		return
	}
	os.Exit(runHelper(os.Args[2:]))
}

func runHelper(args []string) int {
	var status *os.File
	if _, err := unix.FcntlInt(statusFD, unix.F_GETFD, 0); err == nil {
		var st unix.Stat_t
		if unix.Fstat(statusFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			status = os.NewFile(statusFD, "portcullis-seatbelt-status")
		}
	}
	fail := func(format string, a ...any) int {
		msg := "portcullis-seatbelt-helper: " + fmt.Sprintf(format, a...) + "\n"
		if status != nil {
			_, _ = status.WriteString(msg)
		}
		_, _ = os.Stderr.WriteString(msg)
		return HelperExitCode
	}
	if status == nil {
		return fail("status fd %d is not an open pipe: refusing to run outside the seatbelt runner", statusFD)
	}
	if len(args) < 1+nLimits+2 {
		return fail("want %s SOFT:HARD|- x%d -- ARGV..., got %d arguments", helperVersion, nLimits, len(args))
	}
	if args[0] != helperVersion {
		return fail("protocol version %q, want %q", args[0], helperVersion)
	}
	if args[1+nLimits] != helperSep {
		return fail("argument %d is %q, want %q", 1+nLimits, args[1+nLimits], helperSep)
	}
	argv := args[2+nLimits:]
	if !filepath.IsAbs(argv[0]) {
		return fail("argv[0] %q is not an absolute path", argv[0])
	}
	for i := range nLimits {
		l, err := parseLimit(args[1+i])
		if err != nil {
			return fail("%s: %v", limitResources[i].Name, err)
		}
		if !l.Set {
			continue
		}
		if err := limitResources[i].Set(l); err != nil {
			return fail("%v", err)
		}
	}
	if _, err := unix.FcntlInt(statusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fail("close-on-exec on the status fd: %v", err)
	}
	if _, err := status.WriteString(statusReady); err != nil {
		return fail("writing status: %v", err)
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	return fail("exec %s: %v", argv[0], err)
}

// limit is one limit as the helper receives it (process.RlimitArg's
// encoding).
type limit = process.RlimitArg

func parseLimit(s string) (limit, error) { return process.ParseRlimitArg(s) }
