//go:build !unix

package seatbelt

// HelperExitCode is the exit status of a helper that refused to start.
const HelperExitCode = 125

// MaybeRunHelper does nothing where there is no seatbelt helper.
func MaybeRunHelper() {}
