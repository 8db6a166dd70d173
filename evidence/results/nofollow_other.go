//go:build !unix

package results

const noFollow = 0
