// Command portcullis-exec-helper applies a call's rlimits and then execs the
// target program. The gateway binary can play this part itself (it re-execs
// /proc/self/exe), but it links OPA, whose package initialisation costs
// several milliseconds on every Exec; this binary links almost nothing, so
// when it is installed beside the gateway binary the gateway uses it instead.
package main

import (
	"fmt"
	"os"

	"github.com/portcullis/portcullis/backends/process"
)

func main() {
	process.MaybeRunHelper()
	fmt.Fprintln(os.Stderr, "portcullis-exec-helper: started by the gateway's process runner only")
	os.Exit(process.HelperExitCode)
}
