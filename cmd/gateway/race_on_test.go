//go:build race

package main

// raceEnabled scales down tests whose point is volume: the race detector
// makes them ten times slower without making them find more.
const raceEnabled = true
