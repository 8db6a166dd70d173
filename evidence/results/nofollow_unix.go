//go:build unix

package results

import "syscall"

// noFollow refuses a symlink planted in place of a result file.
const noFollow = syscall.O_NOFOLLOW
