// Package schema reads what both SQL stores read of their goose
// migrations alike: the applied and newest versions, and the versions a
// binary knows. Each store keeps its own provider (dialect, locking, Go
// migrations).
package schema

import (
	"context"

	"github.com/pressly/goose/v3"
)

// Status is the newest version applied to p's database (0 on a fresh
// one) and the newest p knows. Its error is goose's, unwrapped.
func Status(ctx context.Context, p *goose.Provider) (current, latest int64, err error) {
	statuses, err := p.Status(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, st := range statuses {
		latest = max(latest, st.Source.Version)
		if st.State == goose.StateApplied {
			current = max(current, st.Source.Version)
		}
	}
	return current, latest, nil
}

// Versions are the versions p knows, for evidence.CheckSchema.
func Versions(p *goose.Provider) []int64 {
	var known []int64
	for _, src := range p.ListSources() {
		known = append(known, src.Version)
	}
	return known
}
