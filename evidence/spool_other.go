//go:build !unix

package evidence

import "os"

const noFollow = 0

func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// lockSpool is a no-op where flock does not exist: run one gateway per
// instance id there.
func lockSpool(*os.File) (func(), error) { return func() {}, nil }
