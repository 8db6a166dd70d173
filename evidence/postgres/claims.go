package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/portcullis/portcullis/evidence"
)

var _ evidence.RunClaimer = (*Store)(nil)

// runClaimClass is the first key of the run claims' two-key session
// advisory locks (the second is the approval id's hash), a space apart
// from the one-key locks of the checkpointer and legal holds.
const runClaimClass = "portcullis.approval-run"

// ClaimRun takes an approved parked call's run claim: a session advisory
// lock on a connection of its own, outside the pool (a run may hold it for
// minutes; the pool's few connections must stay free for evidence). The
// lock dies with the connection: when the process running the call dies,
// PostgreSQL ends its session and any replica can take the claim. A hash
// collision between two approvals only delays the recovery of one until
// the other's run ends.
func (s *Store) ClaimRun(ctx context.Context, approvalID uuid.UUID) (func(), bool, error) {
	if s.ro != nil {
		return nil, false, errReadOnly
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, fmt.Errorf("evidence/postgres: run claim: %w", classify(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))", runClaimClass, approvalID.String()).Scan(&ok); err != nil {
		_ = conn.Close(context.Background())
		return nil, false, fmt.Errorf("evidence/postgres: run claim: %w", classify(err))
	}
	if !ok {
		_ = conn.Close(context.Background())
		return nil, false, nil
	}
	release := func() {
		// Ending the session releases its advisory locks.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
	return release, true, nil
}

var _ evidence.RunLister = (*Store)(nil)
