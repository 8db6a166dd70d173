//go:build !unix

package sqlite

import "context"

// lockFile elects within this process only: on systems without flock the
// embedded store supports one gateway process per file.
func lockFile(string) (unlock func(), ok bool, err error) {
	return func() {}, true, nil
}

func lockFileWait(context.Context, string) (unlock func(), err error) {
	return func() {}, nil
}
