package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/portcullis/portcullis/evidence"
)

// holdLock names the session advisory lock that serializes legal hold
// placements and releases with retention (advisory locks are per database).
const holdLock = "portcullis.evidence_holds"

var _ evidence.HoldStore = (*Store)(nil)

// LockHolds takes the legal hold lock: a session advisory lock on a
// dedicated connection, waited for (pg_advisory_lock) until ctx ends. It
// dies with the connection, so a crashed retention run or placement never
// leaves holds locked.
func (s *Store) LockHolds(ctx context.Context) (func(), error) {
	if s.ro != nil {
		return nil, errReadOnly
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("evidence/postgres: legal hold lock: %w", classify(err))
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", holdLock); err != nil {
		// A cancelled wait may leave the lock granted on this
		// connection: never hand it back to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
		return nil, fmt.Errorf("evidence/postgres: legal hold lock: %w", classify(err))
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", holdLock); err != nil {
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}
