//go:build unix

package sandbox

// noWatcher reports nothing: the cache scans afresh for every Build.
type noWatcher struct{}

func (noWatcher) watching() bool         { return false }
func (noWatcher) add(int) (int, error)   { return -1, nil }
func (noWatcher) remove(int)             {}
func (noWatcher) read() ([]event, error) { return nil, nil }
func (noWatcher) reset() error           { return nil }
func (noWatcher) close()                 {}
