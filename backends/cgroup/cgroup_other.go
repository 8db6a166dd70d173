//go:build !linux

package cgroup

import (
	"context"
	"errors"
)

var errNotLinux = errors.New("cgroup: cgroups exist only on Linux")

// FindParent fails outside Linux: there are no cgroups.
func FindParent() (*Parent, error) { return nil, errNotLinux }

// NewCall fails outside Linux.
func (p *Parent) NewCall(pidsMax int) (*Call, error) { return nil, errNotLinux }

// NewCallLimits fails outside Linux.
func (p *Parent) NewCallLimits(l Limits) (*Call, error) { return nil, errNotLinux }

// Add fails outside Linux.
func (c *Call) Add(pid int) error { return errNotLinux }

// KillAll fails outside Linux.
func (c *Call) KillAll(ctx context.Context) error { return errNotLinux }

// Remove does nothing outside Linux.
func (c *Call) Remove() {}

// Peak is always unknown (-1) outside Linux.
func (c *Call) Peak() int { return -1 }

// OOMKills is always 0 outside Linux.
func (c *Call) OOMKills() int { return 0 }

// Pids fails outside Linux.
func (c *Call) Pids() ([]int, error) { return nil, errNotLinux }
