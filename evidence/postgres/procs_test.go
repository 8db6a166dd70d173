package postgres_test

import "runtime"

func procs() int { return runtime.GOMAXPROCS(0) }
