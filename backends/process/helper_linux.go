package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The helper protocol. The runner re-executes the gateway binary as
//
//	<helper> __portcullis-exec-helper v4 <n> <procs>... <user> <m> <exec>... <cpu> <fsize> <nofile> <data> -- <argv0> <args...>
//
// with the child's complete environment and the status pipe as fd 3. n is
// the number of procs arguments that follow (0 without a call cgroup; 1 for
// cgroup v2 or a call with no memory cgroup; 2 for cgroup v1's pids and
// memory hierarchies), each the absolute, clean path of a call cgroup's
// cgroup.procs on a cgroup filesystem; the helper writes "0" to each,
// moving itself into the call cgroup, before anything else, so the target
// and all it forks are born inside. user is "-" (keep the runner's user)
// or "UID:GID" in decimal: the helper, started as root, then drops to that
// user for good (no supplementary groups, real, effective and saved ids
// all changed, no_new_privs set so no set-uid program can climb back),
// after the cgroup join (which needs root) and before the exec restriction,
// the limits and the exec. m is "-" (no exec restriction) or the number of
// exec arguments that follow, absolute paths of the files and directories
// the target may execute (RestrictExec, applied just before the limits).
// Each limit is "-" (leave as inherited) or "SOFT:HARD" in decimal. The
// helper sets the limits, verifies them, marks fd 3 close-on-exec and
// execs argv0 directly (no PATH lookup, no shell) with its own environment,
// which is exactly Spec.Env: the protocol lives only in argv, so nothing
// leaks into the target's environment. On any failure it writes one line
// to fd 3 and stderr and exits with HelperExitCode, so the runner never
// runs a program unlimited, unrestricted or as the wrong user. Just before
// exec it writes "ready\n" to fd 3: a status pipe that closes with nothing
// but that line is the only outcome the runner treats as started, so a
// HelperPath that is not a helper, or a helper that died early, fails
// closed. (v1 had no procs, v2 no user, v3 either no user or no exec
// restriction and one procs argument: the version token changes with the
// layout so that a mismatched helper refuses instead of reading one
// argument as another.)
const (
	helperArg     = "__portcullis-exec-helper"
	helperVersion = "v4"
	helperSep     = "--"
	statusFD      = 3
	statusReady   = HelperReady
	// nLimits is the number of limits, which follow the exec arguments.
	nLimits = 4
	// maxProcs is the most procs arguments (v1: pids and memory).
	maxProcs = 2
	// maxExecAllow is the most exec arguments.
	maxExecAllow = 64
	// procsBase is the only file name the helper accepts as procs.
	procsBase = "cgroup.procs"
)

// HelperExitCode is the exit status of a helper that refused to start the
// target (bad protocol, a limit that could not be set, exec failure). The
// runner does not rely on it alone: the refusal is also written to the
// status pipe, which is what turns it into a Run error.
const HelperExitCode = 125

// limitResources lists the rlimits in protocol order. DATA comes last so
// that the helper needs no new memory after the data limit is in place
// until it execs.
var limitResources = [nLimits]HelperLimit{
	HelperLimits[0], HelperLimits[1], HelperLimits[2],
	{unix.RLIMIT_DATA, "RLIMIT_DATA"},
}

// rlimitArg is one limit as the helper receives it.
type rlimitArg = RlimitArg

func parseRlimitArg(s string) (rlimitArg, error) { return ParseRlimitArg(s) }

// userArg renders the helper's user argument.
func userArg(c *Credential) string {
	if c == nil {
		return "-"
	}
	return strconv.FormatUint(uint64(c.UID), 10) + ":" + strconv.FormatUint(uint64(c.GID), 10)
}

// parseUserArg reads the helper's user argument; nil means "-".
func parseUserArg(s string) (*Credential, error) {
	if s == "-" {
		return nil, nil
	}
	us, gs, ok := strings.Cut(s, ":")
	if !ok {
		return nil, fmt.Errorf("user %q: want \"-\" or UID:GID", s)
	}
	u, err := strconv.ParseUint(us, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid: %w", s, err)
	}
	g, err := strconv.ParseUint(gs, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid: %w", s, err)
	}
	if u == 0 || g == 0 {
		return nil, fmt.Errorf("user %q: switching to root is not dropping privileges", s)
	}
	return &Credential{UID: uint32(u), GID: uint32(g)}, nil
}

// helperArgs builds the helper's argv (without the helper path itself);
// procs are the call cgroups' cgroup.procs files, none without a call
// cgroup; user nil or the user to drop to; execAllow nil means no exec
// restriction.
func helperArgs(procs []string, user *Credential, execAllow []string, limits [nLimits]rlimitArg, argv []string) []string {
	args := make([]string, 0, 8+len(procs)+len(execAllow)+nLimits+len(argv))
	args = append(args, "portcullis-exec-helper", helperArg, helperVersion, strconv.Itoa(len(procs)))
	args = append(args, procs...)
	args = append(args, userArg(user))
	if execAllow == nil {
		args = append(args, "-")
	} else {
		args = append(args, strconv.Itoa(len(execAllow)))
		args = append(args, execAllow...)
	}
	for _, l := range limits {
		args = append(args, l.String())
	}
	args = append(args, helperSep)
	return append(args, argv...)
}

// MaybeRunHelper turns this process into the exec helper when it was started
// as one, and returns immediately otherwise. main() and every TestMain of a
// package that uses the Runner call it first thing, before flags are parsed
// or anything else starts: the helper must do nothing but set limits and
// exec.
func MaybeRunHelper() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case helperArg:
		os.Exit(runHelper(os.Args[2:]))
	case restrictArg:
		os.Exit(runRestrict(os.Args[2:]))
	}
}

// The exec-restrict protocol, for a sandbox launcher that cannot itself
// run under the restriction (bwrap: Landlock forbids the mounts it makes).
// The launcher runs the helper as its command instead of the program:
//
//	<helper> __portcullis-exec-restrict v1 <m> <exec>... -- <argv0> <args...>
//
// and the helper restricts itself to executing the m paths (RestrictExec)
// and execs argv0 with its own environment. On failure it writes one line
// starting with RestrictRefusal to stderr and exits with HelperExitCode,
// never running the program.
const (
	restrictArg     = "__portcullis-exec-restrict"
	restrictVersion = "v1"
)

// RestrictRefusal starts the line an exec-restrict helper writes to stderr
// when it refuses to run the program.
const RestrictRefusal = "portcullis-exec-restrict: "

// RestrictArgs is the argv (after the helper path) that makes the helper
// restrict exec to allow, then exec argv.
func RestrictArgs(allow, argv []string) []string {
	out := make([]string, 0, 5+len(allow)+len(argv))
	out = append(out, restrictArg, restrictVersion, strconv.Itoa(len(allow)))
	out = append(out, allow...)
	out = append(out, helperSep)
	return append(out, argv...)
}

// runRestrict is the exec-restrict helper; it returns only on failure.
func runRestrict(args []string) int {
	fail := func(format string, a ...any) int {
		_, _ = os.Stderr.WriteString(RestrictRefusal + fmt.Sprintf(format, a...) + "\n")
		return HelperExitCode
	}
	if len(args) < 2 || args[0] != restrictVersion {
		return fail("want %s M EXEC... -- ARGV...", restrictVersion)
	}
	m, err := strconv.Atoi(args[1])
	if err != nil || m < 0 || m > maxExecAllow || len(args) < 2+m+2 || args[2+m] != helperSep {
		return fail("want %s M EXEC... -- ARGV..., with M from 0 to %d", restrictVersion, maxExecAllow)
	}
	allow := args[2 : 2+m]
	for _, p := range allow {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fail("%q is not a clean absolute path", p)
		}
	}
	argv := args[3+m:]
	if !filepath.IsAbs(argv[0]) {
		return fail("argv[0] %q is not an absolute path", argv[0])
	}
	// Landlock restricts the calling thread only: the exec must come from
	// the same thread.
	runtime.LockOSThread()
	if err := RestrictExec(allow); err != nil {
		return fail("%v", err)
	}
	err = unix.Exec(argv[0], argv, os.Environ())
	return fail("exec %s: %v", argv[0], err)
}

// HelperPath is the real path of the binary this runner re-executes as its
// helper, for a launcher that must make it visible inside a sandbox.
func (r *Runner) HelperPath() (string, error) {
	return filepath.EvalSymlinks(r.helper)
}

// helperPlan is what the runner asks of the helper: the cgroups to join,
// the user to become, the exec restriction (nil: none), the limits and the
// target's argv.
type helperPlan struct {
	procs     []string
	user      *Credential
	execAllow []string
	limits    [nLimits]rlimitArg
	argv      []string
}

// parseHelperArgs reads the helper's arguments (helperArgs' encoding),
// checking every path and limit.
func parseHelperArgs(args []string) (helperPlan, error) {
	if len(args) < 2 {
		return helperPlan{}, fmt.Errorf("want %s N PROCS... UID:GID|- M|- EXEC... SOFT:HARD|- x%d -- ARGV..., got %d arguments", helperVersion, nLimits, len(args))
	}
	if args[0] != helperVersion {
		return helperPlan{}, fmt.Errorf("protocol version %q, want %q", args[0], helperVersion)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 || n > maxProcs || len(args) < 2+n {
		return helperPlan{}, fmt.Errorf("cgroup count %q: want 0 to %d, each followed by its path", args[1], maxProcs)
	}
	procs := args[2 : 2+n]
	for _, p := range procs {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || filepath.Base(p) != procsBase {
			return helperPlan{}, fmt.Errorf("cgroup: %q is not a clean absolute path to %s", p, procsBase)
		}
	}
	if len(args) < 4+n {
		return helperPlan{}, fmt.Errorf("want %s N PROCS... UID:GID|- M|- EXEC... SOFT:HARD|- x%d -- ARGV..., got %d arguments", helperVersion, nLimits, len(args))
	}
	user, err := parseUserArg(args[2+n])
	if err != nil {
		return helperPlan{}, err
	}
	var execAllow []string // nil: no restriction
	limitsAt := 4 + n
	if m := args[3+n]; m != "-" {
		k, err := strconv.Atoi(m)
		if err != nil || k < 0 || k > maxExecAllow {
			return helperPlan{}, fmt.Errorf("exec count %q: want - or 0 to %d", m, maxExecAllow)
		}
		if len(args) < limitsAt+k {
			return helperPlan{}, fmt.Errorf("want %s N PROCS... UID:GID|- M|- EXEC... SOFT:HARD|- x%d -- ARGV..., got %d arguments", helperVersion, nLimits, len(args))
		}
		execAllow = append([]string{}, args[limitsAt:limitsAt+k]...)
		for _, p := range execAllow {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				return helperPlan{}, fmt.Errorf("exec restriction: %q is not a clean absolute path", p)
			}
		}
		limitsAt += k
	}
	if len(args) < limitsAt+nLimits+2 {
		return helperPlan{}, fmt.Errorf("want %s N PROCS... UID:GID|- M|- EXEC... SOFT:HARD|- x%d -- ARGV..., got %d arguments", helperVersion, nLimits, len(args))
	}
	if args[limitsAt+nLimits] != helperSep {
		return helperPlan{}, fmt.Errorf("argument %d is %q, want %q", limitsAt+nLimits, args[limitsAt+nLimits], helperSep)
	}
	var limits [nLimits]rlimitArg
	for i := range nLimits {
		l, err := parseRlimitArg(args[limitsAt+i])
		if err != nil {
			return helperPlan{}, fmt.Errorf("%s: %v", limitResources[i].Name, err)
		}
		limits[i] = l
	}
	argv := args[limitsAt+nLimits+1:]
	if !filepath.IsAbs(argv[0]) {
		return helperPlan{}, fmt.Errorf("argv[0] %q is not an absolute path", argv[0])
	}
	return helperPlan{procs: procs, user: user, execAllow: execAllow, limits: limits, argv: argv}, nil
}

// setLimits sets each limit and reads it back. It allocates only to
// report a failure: RLIMIT_DATA may already be in place.
func setLimits(limits [nLimits]rlimitArg) error {
	for i, l := range limits {
		if !l.Set {
			continue
		}
		if err := limitResources[i].Set(l); err != nil {
			return err
		}
	}
	return nil
}

// runHelper applies the limits and execs the target; it returns only on
// failure, with the exit code to use.
func runHelper(args []string) int {
	// The runner's thread is the parent PDEATHSIG watches; remember it
	// before anything can make it go away unnoticed.
	ppid := os.Getppid()
	status := statusWriter()
	fail := func(format string, a ...any) int {
		msg := "portcullis-exec-helper: " + fmt.Sprintf(format, a...) + "\n"
		if status != nil {
			_, _ = status.Write([]byte(msg))
		}
		_, _ = os.Stderr.WriteString(msg)
		return HelperExitCode
	}
	if status == nil {
		return fail("status fd %d is not open: refusing to run outside the process runner", statusFD)
	}
	plan, err := parseHelperArgs(args)
	if err != nil {
		return fail("%v", err)
	}
	procs, user, execAllow, limits, argv := plan.procs, plan.user, plan.execAllow, plan.limits, plan.argv
	// Join first: before the limits (RLIMIT_NOFILE could leave no fd to
	// open procs with) and long before the exec, so the target never runs
	// outside the call cgroup. A failed join is a refusal, not a warning:
	// the runner would otherwise believe the target contained.
	for _, p := range procs {
		if err := joinCgroup(p); err != nil {
			return fail("cgroup: joining %s: %v", p, err)
		}
	}
	// Then the user: after the join (root's to make), before the exec
	// restriction, the limits (which an unprivileged user may still lower)
	// and the exec. The thread that drops is the one that execs:
	// PR_SET_PDEATHSIG is per thread, and the kernel clears it when the
	// credentials change; Landlock, too, restricts the calling thread only.
	runtime.LockOSThread()
	if user != nil {
		if err := dropTo(*user); err != nil {
			return fail("dropping to uid %d gid %d: %v", user.UID, user.GID, err)
		}
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
			return fail("re-arming the parent-death signal: %v", err)
		}
		if os.Getppid() != ppid {
			return fail("the runner exited while the helper was starting")
		}
	}
	// The exec restriction before the limits: it opens files and may
	// allocate. Fail closed: the target must never run unrestricted when
	// a restriction was asked for.
	if execAllow != nil {
		if err := RestrictExec(execAllow); err != nil {
			return fail("%v", err)
		}
	}
	// Everything exec needs is built now: once RLIMIT_DATA is in place the
	// runtime may be unable to map more memory, so nothing after it may
	// allocate.
	debug.SetGCPercent(-1)
	argv0p, err := unix.BytePtrFromString(argv[0])
	if err != nil {
		return fail("argv[0]: %v", err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fail("argv: %v", err)
	}
	envvp, err := syscall.SlicePtrFromStrings(os.Environ())
	if err != nil {
		return fail("environment: %v", err)
	}
	ready := []byte(statusReady)
	execFailed := make([]byte, 0, 1024)
	execFailed = append(execFailed, "portcullis-exec-helper: exec "...)
	execFailed = append(execFailed, argv[0][:min(len(argv[0]), 512)]...)
	execFailed = append(execFailed, ": "...)

	if err := setLimits(limits); err != nil {
		return fail("%v", err)
	}
	// The target must not inherit the status pipe; without it the runner
	// could not tell a refusal from a start.
	if _, err := unix.FcntlInt(statusFD, unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return fail("close-on-exec on status fd: %v", err)
	}
	// The handshake tells the runner a real helper set the limits; a
	// failed exec appends its reason after it.
	if _, err := unix.Write(statusFD, ready); err != nil {
		return fail("writing status: %v", err)
	}
	// A raw execve, not syscall.Exec, which allocates its argument arrays
	// after the limits are set. SlicePtrFromStrings ends each array with nil.
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(argv0p)),
		uintptr(unsafe.Pointer(&argvp[0])),
		uintptr(unsafe.Pointer(&envvp[0])))
	runtime.KeepAlive(argv0p)
	runtime.KeepAlive(argvp)
	runtime.KeepAlive(envvp)
	execFailed = append(execFailed, errno.Error()...) // errno strings are static: no allocation
	execFailed = append(execFailed, '\n')
	_, _ = unix.Write(statusFD, execFailed)
	_, _ = unix.Write(2, execFailed)
	return HelperExitCode
}

// dropTo makes this process c for good: supplementary groups cleared, real,
// effective and saved gid then uid set (the syscall package applies each to
// every thread), no_new_privs so that no set-uid or file-capability program
// can give the target root back, and then a check that all of it holds and
// that root cannot be regained.
func dropTo(c Credential) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(int(c.GID), int(c.GID), int(c.GID)); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(int(c.UID), int(c.UID), int(c.UID)); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	ru, eu, su := unix.Getresuid()
	rg, eg, sg := unix.Getresgid()
	want := [6]int{int(c.UID), int(c.UID), int(c.UID), int(c.GID), int(c.GID), int(c.GID)}
	if got := [6]int{ru, eu, su, rg, eg, sg}; got != want {
		return fmt.Errorf("ids are %v after the switch, want %v", got, want)
	}
	if groups, err := syscall.Getgroups(); err != nil || len(groups) != 0 {
		return fmt.Errorf("supplementary groups %v (%v) after the switch, want none", groups, err)
	}
	if err := syscall.Setresuid(0, 0, 0); err == nil {
		return errors.New("root could be regained after the switch")
	}
	return nil
}

// joinCgroup moves this process (all its threads) into the cgroup whose
// cgroup.procs is procs. It checks that procs is on a cgroup filesystem, so
// that a stray regular file of that name cannot pass for a join.
func joinCgroup(procs string) error {
	fd, err := unix.Open(procs, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return err
	}
	if fs.Type != unix.CGROUP_SUPER_MAGIC && fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("not on a cgroup filesystem (type %#x)", fs.Type)
	}
	if _, err := unix.Write(fd, []byte("0")); err != nil {
		return err
	}
	return nil
}

// statusWriter returns fd 3 when it is an open pipe, nil otherwise.
func statusWriter() *os.File {
	if _, err := unix.FcntlInt(statusFD, unix.F_GETFD, 0); err != nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(statusFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return nil
	}
	return os.NewFile(statusFD, "portcullis-exec-status")
}
