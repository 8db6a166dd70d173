// Package schema runs the goose migrations of the SQL stores: what both do
// alike (the embedded files, the version table, up, down, status and the
// versions a binary knows), with what differs (dialect, directory,
// locking, Go migrations, error classification) given by each store.
package schema

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"

	"github.com/portcullis/portcullis/migrations"
)

// VersionTable is goose's bookkeeping table, named for the project so it
// never collides with another goose user of a shared database.
const VersionTable = "portcullis_schema_version"

// Migrator runs one store's migrations.
type Migrator struct {
	// Name starts the store's errors ("evidence/postgres").
	Name    string
	Dialect goose.Dialect
	// Dir is the store's directory in migrations.FS.
	Dir string
	// Options are the store's own provider options (a session locker, Go
	// migrations), made afresh for each provider; their error is
	// returned as it is.
	Options func() ([]goose.ProviderOption, error)
	// Classify wraps the store's unavailability errors.
	Classify func(error) error
}

// Provider is a goose provider of the store's migrations on db.
func (m Migrator) Provider(db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(migrations.FS, m.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: migrations: %w", m.Name, err)
	}
	own, err := m.Options()
	if err != nil {
		return nil, err
	}
	opts := append([]goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(slog.New(slog.DiscardHandler)),
	}, own...)
	p, err := goose.NewProvider(m.Dialect, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: migrations: %w", m.Name, err)
	}
	return p, nil
}

// Up applies the pending migrations.
func (m Migrator) Up(ctx context.Context, db *sql.DB) error {
	p, err := m.Provider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("%s: migrate: %w", m.Name, m.Classify(err))
	}
	return nil
}

// DownTo rolls the schema back to version v with the migrations' Down
// sections (for tests that upgrade an older store).
func (m Migrator) DownTo(ctx context.Context, db *sql.DB, v int64) error {
	p, err := m.Provider(db)
	if err != nil {
		return err
	}
	_, err = p.DownTo(ctx, v)
	return err
}

// Status is the newest version applied to db (0 on a fresh database) and
// the newest this binary knows.
func (m Migrator) Status(ctx context.Context, db *sql.DB) (current, latest int64, err error) {
	p, err := m.Provider(db)
	if err != nil {
		return 0, 0, err
	}
	statuses, err := p.Status(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: migration status: %w", m.Name, m.Classify(err))
	}
	for _, st := range statuses {
		latest = max(latest, st.Source.Version)
		if st.State == goose.StateApplied {
			current = max(current, st.Source.Version)
		}
	}
	return current, latest, nil
}

// Versions are the versions this binary knows, for evidence.CheckSchema:
// read from the files, never from db (a read-only store's goose would
// create its table).
func (m Migrator) Versions(db *sql.DB) ([]int64, error) {
	p, err := m.Provider(db)
	if err != nil {
		return nil, err
	}
	var known []int64
	for _, src := range p.ListSources() {
		known = append(known, src.Version)
	}
	return known, nil
}
