//go:build !unix

package statedir

import "io/fs"

func ownedByUs(fs.FileInfo) bool { return true }
