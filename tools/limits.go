package tools

import "github.com/portcullis/portcullis/wire"

// Resource limits of a program a tool runs (Exec, code.run) when the policy
// leaves one at zero, and the ceilings a policy value is clamped to. The
// defaults follow the contract's example policy (cpu_seconds, unset, is the
// call's timeout); the ceilings keep a typo in a policy from lifting a
// bound. Memory differs per tool (a program's address space, Deno's heap),
// so each tool passes its own bounds to ProgramLimits.
const (
	DefaultFsizeBytes = 64 << 20
	DefaultNofile     = 256

	MaxCPUSeconds = 3600
	MaxFsizeBytes = 16 << 30
	MaxNofile     = 65536
)

// ProgramLimits combines what the caller asked for (its timeout and output
// cap, in req) with the policy's limits p: the timeout and output cap are
// the smaller of the two where the policy sets one; the rest come from the
// policy, or the defaults when it sets none, clamped to the ceilings. The
// memory default and ceiling are the tool's own. A negative policy value
// fails closed (internal: the policy is broken, not the caller).
func ProgramLimits(req, p wire.Limits, defaultMemory, maxMemory int64) (wire.Limits, error) {
	if p.TimeoutS < 0 || p.CPUSeconds < 0 || p.MemoryBytes < 0 || p.FsizeBytes < 0 || p.Nofile < 0 || p.MaxOutputBytes < 0 {
		return wire.Limits{}, wire.Errorf(wire.CodeInternal, "the policy returned a negative limit; limits must be zero (default) or positive")
	}
	l := wire.Limits{TimeoutS: req.TimeoutS, MaxOutputBytes: req.MaxOutputBytes}
	if p.TimeoutS > 0 {
		l.TimeoutS = min(l.TimeoutS, p.TimeoutS)
	}
	if p.MaxOutputBytes > 0 {
		l.MaxOutputBytes = min(l.MaxOutputBytes, p.MaxOutputBytes)
	}
	// RFC 0002: CPU time defaults to the wall-clock timeout.
	l.CPUSeconds = orDefault(p.CPUSeconds, max(l.TimeoutS, 1), MaxCPUSeconds)
	l.MemoryBytes = orDefault(p.MemoryBytes, defaultMemory, maxMemory)
	l.FsizeBytes = orDefault(p.FsizeBytes, DefaultFsizeBytes, MaxFsizeBytes)
	l.Nofile = orDefault(p.Nofile, DefaultNofile, MaxNofile)
	return l, nil
}

func orDefault[T int | int64](v, def, ceiling T) T {
	if v == 0 {
		return def
	}
	return min(v, ceiling)
}
