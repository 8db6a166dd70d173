//go:build unix

// The helper protocol both runners share: how a limit is written on the
// helper's command line, and how it reports on its status pipe.

package process

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// HelperLimit is a resource limit a runner's helper sets, and its name
// in errors.
type HelperLimit struct {
	Res  int
	Name string
}

// HelperLimits are the limits both runners' helpers set, in protocol
// order; the process runner's helper sets RLIMIT_DATA after them.
var HelperLimits = [3]HelperLimit{
	{unix.RLIMIT_CPU, "RLIMIT_CPU"},
	{unix.RLIMIT_FSIZE, "RLIMIT_FSIZE"},
	{unix.RLIMIT_NOFILE, "RLIMIT_NOFILE"},
}

// LimitArgs are the helper's arguments for limits, want[i] being the
// value of limits[i] (0: leave it). RLIMIT_CPU gets one second between
// soft and hard: SIGXCPU first, so the program is seen to die of its CPU
// limit, then SIGKILL. With clamp, a limit above the hard limit this
// process already has is lowered to it (the child could never get more,
// and asking would fail); a hard limit not below infinity (the system's
// RLIM_INFINITY) bounds nothing.
func LimitArgs(limits []HelperLimit, want []int64, clamp bool, infinity uint64) ([]RlimitArg, error) {
	out := make([]RlimitArg, len(limits))
	for i, v := range want {
		if v == 0 {
			continue
		}
		soft, hard := uint64(v), uint64(v)
		if limits[i].Res == unix.RLIMIT_CPU {
			hard = soft + 1
		}
		if clamp {
			var cur unix.Rlimit
			if err := unix.Getrlimit(limits[i].Res, &cur); err != nil {
				return nil, fmt.Errorf("getrlimit %s: %w", limits[i].Name, err)
			}
			if cur.Max < infinity {
				hard = min(hard, cur.Max)
				soft = min(soft, hard)
			}
		}
		out[i] = RlimitArg{Set: true, Soft: soft, Hard: hard}
	}
	return out, nil
}

// Set sets the limit to l in this process and reads it back. It
// allocates only to report a failure (the process runner's helper may
// already run under its RLIMIT_DATA).
func (r HelperLimit) Set(l RlimitArg) error {
	want := unix.Rlimit{Cur: l.Soft, Max: l.Hard}
	if err := unix.Setrlimit(r.Res, &want); err != nil {
		return fmt.Errorf("setrlimit %s to %s: %v", r.Name, l, err)
	}
	var got unix.Rlimit
	if err := unix.Getrlimit(r.Res, &got); err != nil {
		return fmt.Errorf("getrlimit %s: %v", r.Name, err)
	}
	if got != want {
		return fmt.Errorf("%s is %d:%d after setting %s", r.Name, got.Cur, got.Max, l)
	}
	return nil
}

// RlimitArg is one resource limit as a runner's helper receives it on its
// command line: "-" (leave it) or SOFT:HARD. The process runner's helper
// and the seatbelt runner's helper read the same encoding.
type RlimitArg struct {
	Set        bool
	Soft, Hard uint64
}

func (a RlimitArg) String() string {
	if !a.Set {
		return "-"
	}
	return strconv.FormatUint(a.Soft, 10) + ":" + strconv.FormatUint(a.Hard, 10)
}

// ParseRlimitArg reads what RlimitArg.String wrote; a soft value above the
// hard one is refused.
func ParseRlimitArg(s string) (RlimitArg, error) {
	if s == "-" {
		return RlimitArg{}, nil
	}
	softS, hardS, ok := strings.Cut(s, ":")
	if !ok {
		return RlimitArg{}, fmt.Errorf("limit %q: want \"-\" or SOFT:HARD", s)
	}
	soft, err := strconv.ParseUint(softS, 10, 64)
	if err != nil {
		return RlimitArg{}, fmt.Errorf("limit %q: soft value: %w", s, err)
	}
	hard, err := strconv.ParseUint(hardS, 10, 64)
	if err != nil {
		return RlimitArg{}, fmt.Errorf("limit %q: hard value: %w", s, err)
	}
	if soft > hard {
		return RlimitArg{}, fmt.Errorf("limit %q: soft above hard", s)
	}
	return RlimitArg{Set: true, Soft: soft, Hard: hard}, nil
}

// statusReadTimeout bounds reading a helper's status pipe.
const statusReadTimeout = time.Second

// HelperReady is what a runner's helper writes on its status pipe once the
// limits are set, just before it execs; a refusal or a failed exec follows
// it, or stands alone.
const HelperReady = "ready\n"

// ReadHelperStatus returns the helper's refusal read from its status pipe,
// or "" when it set the limits and exec'd the target. missing is the
// refusal when the helper wrote nothing (the binary does not run the
// helper at all).
func ReadHelperStatus(f *os.File, missing string) string {
	_ = f.SetReadDeadline(time.Now().Add(statusReadTimeout))
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "reading helper status: " + err.Error()
	}
	switch s := string(b); {
	case s == HelperReady:
		return ""
	case s == "":
		return missing
	default:
		return strings.TrimSpace(strings.TrimPrefix(s, HelperReady))
	}
}
