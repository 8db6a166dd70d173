package fstool

import "testing"

// TestAttackRaceNoOpenat2 runs the race on the O_NOFOLLOW walk used where
// openat2 is missing. Not parallel: it switches the fallback on for the
// package while it runs (parallel tests wait for it).
func TestAttackRaceNoOpenat2(t *testing.T) {
	noOpenat2.Store(true)
	defer noOpenat2.Store(false)
	runAttackRace(t, attackDuration()/2)
}
