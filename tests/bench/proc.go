package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of the CPU times in
// /proc/<pid>/stat. It is 100 on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// procCPU is the CPU a process used: its own user+system time and that of
// its children it has waited for (cutime+cstime), which is where the
// sandboxes and programs an Exec call starts are accounted.
type procCPU struct {
	Self     time.Duration
	Children time.Duration
}

// Total is Self + Children.
func (c procCPU) Total() time.Duration { return c.Self + c.Children }

// Sub is c - o.
func (c procCPU) Sub(o procCPU) procCPU {
	return procCPU{Self: c.Self - o.Self, Children: c.Children - o.Children}
}

// readCPU reads /proc/<pid>/stat ("self" for this process).
func readCPU(pid string) (procCPU, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return procCPU{}, err
	}
	return parseStat(b)
}

// parseStat parses the utime, stime, cutime and cstime fields (14-17) of a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted after its last ')'.
func parseStat(b []byte) (procCPU, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procCPU{}, fmt.Errorf("proc stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14 → f[11].
	if len(f) < 15 {
		return procCPU{}, fmt.Errorf("proc stat: %d fields", len(f))
	}
	var v [4]int64
	for k := range v {
		n, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return procCPU{}, fmt.Errorf("proc stat field %d: %w", 14+k, err)
		}
		v[k] = n
	}
	return procCPU{
		Self:     time.Duration(v[0]+v[1]) * clockTick,
		Children: time.Duration(v[2]+v[3]) * clockTick,
	}, nil
}

// peakRSS returns VmHWM of a process in bytes: the most resident memory it
// has had since it started.
func peakRSS(pid string) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fs := strings.Fields(rest)
			if len(fs) != 2 || fs[1] != "kB" {
				return 0, fmt.Errorf("proc status: VmHWM %q", rest)
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("proc status of %s: no VmHWM", pid)
}

// postgresAux are the PostgreSQL server processes that work for every
// database: the WAL writer flushes commits, the others write pages back.
var postgresAux = []string{": walwriter", ": checkpointer", ": background writer"}

// dbCPU sums the CPU (self only) of the PostgreSQL processes that serve
// database db: its backends (their command line names the database) and
// the server's shared writers, which also work for other databases on the
// host. The pools keep their connections for the whole run, so no backend
// exits between two samples.
func dbCPU(db string) time.Duration {
	return commCPU("postgres", func(cmdline string) bool {
		if strings.Contains(cmdline, " "+db+" ") {
			return true
		}
		for _, a := range postgresAux {
			if strings.Contains(cmdline, a) {
				return true
			}
		}
		return false
	})
}

// commCPU sums the CPU (self only) of every process whose command name is
// comm and whose command line keep accepts.
func commCPU(comm string, keep func(cmdline string) bool) time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		lo, hi := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if lo < 0 || hi < lo || string(b[lo+1:hi]) != comm {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !keep(strings.ReplaceAll(string(cmdline), "\x00", " ")) {
			continue
		}
		if c, err := parseStat(b); err == nil {
			total += c.Self
		}
	}
	return total
}

// loadAvg returns the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
