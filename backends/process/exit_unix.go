//go:build unix

package process

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExitStatus is how a waited-for process ended: its exit code, or -1 and
// the name of the signal that killed it. Every runner reports it this way.
func ExitStatus(state *os.ProcessState) (code int, signal *string) {
	ws, ok := state.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return state.ExitCode(), nil
	case ws.Signaled():
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = fmt.Sprintf("signal %d", int(ws.Signal()))
		}
		return -1, &name
	}
	return ws.ExitStatus(), nil
}
