//go:build !unix

package sandbox

import (
	"errors"
	"fmt"
	"os"
)

// ErrScanBudget and ErrTreeChanged: see build.go.
var (
	ErrScanBudget  = errors.New("granted trees too large to search for secrets")
	ErrTreeChanged = errors.New("granted tree changed while the sandbox was being built")
)

// Cache exists only where the trees can be searched (unix).
type Cache struct{}

// Window: see build.go.
type Window struct{}

// AutorunChange: see build.go.
type AutorunChange struct {
	Path          string `json:"path"`
	Reason        string `json:"reason"`
	QuarantinedAs string `json:"quarantined_as,omitempty"`
	Error         string `json:"error,omitempty"`
}

func NewCache(ProfileOptions) *Cache         { return &Cache{} }
func newUncachedCache(ProfileOptions) *Cache { return &Cache{} }
func (*Cache) Close()                        {}
func (*Window) Verify() error                { return nil }
func (*Window) Close()                       {}
func (*Window) Finish() []AutorunChange      { return nil }
func (*Cache) Build(Spec) (Profile, *Window, error) {
	return Profile{}, nil, fmt.Errorf("sandbox: not supported on this system: %w", ErrUnsafePath)
}

// Active: see build.go.
func (*Window) Active() bool { return false }

// Pin: see pin.go.
func (p Profile) Pin() ([]*os.File, error) { return nil, nil }
