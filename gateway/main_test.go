package gateway

import (
	"os"
	"testing"

	"github.com/portcullis/portcullis/backends/process"
)

// TestMain lets this test binary double as the process runner's rlimit
// helper, which the Exec benchmarks start.
func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Exit(m.Run())
}
