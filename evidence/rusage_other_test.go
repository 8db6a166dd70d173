//go:build !unix

package evidence_test

import "time"

// processCPU is not measured on this system; the metric is then omitted.
func processCPU() time.Duration { return 0 }
