package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// claimCheckEvery is how often a held run claim's connection is checked.
const claimCheckEvery = time.Second

// ClaimRun takes an approved parked call's run claim: a session advisory
// lock on a connection of its own, outside the pool (a run may hold it for
// minutes; the pool's few connections must stay free for evidence). The
// lock dies with the connection: when the process running the call dies,
// PostgreSQL ends its session and any replica can take the claim. While
// the claim is held, its connection is checked every second; a connection
// lost while this process lives (a restarted server, a proxy's idle
// timeout, a terminated backend) is replaced and the lock taken again, so
// the claim follows the process, not one connection (the gateway's
// recovery waits longer than that before it takes a free claim as a dead
// runner's). A hash collision between two approvals only delays the
// recovery of one until the other's run ends. Closing the store gives up
// every claim it holds.
func (s *Store) ClaimRun(ctx context.Context, approvalID uuid.UUID) (func(), bool, error) {
	if s.ro != nil {
		return nil, false, errReadOnly
	}
	select {
	case <-s.stop:
		return nil, false, errors.New("evidence/postgres: run claim: the store is closed")
	default:
	}
	conn, ok, err := s.lockRun(ctx, approvalID)
	if err != nil || !ok {
		return nil, false, err
	}
	released, done := make(chan struct{}), make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		s.keepClaim(conn, approvalID, released)
	}()
	var once sync.Once
	release := func() {
		once.Do(func() { close(released) })
		<-done
	}
	return release, true, nil
}

// lockRun opens a connection and tries the run claim's lock on it; the
// connection is returned (holding the lock) only when ok.
func (s *Store) lockRun(ctx context.Context, approvalID uuid.UUID) (*pgx.Conn, bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, false, fmt.Errorf("evidence/postgres: run claim: %w", classify(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1), hashtext($2))", runClaimClass, approvalID.String()).Scan(&ok); err != nil {
		closeConn(conn)
		return nil, false, fmt.Errorf("evidence/postgres: run claim: %w", classify(err))
	}
	if !ok {
		closeConn(conn)
		return nil, false, nil
	}
	return conn, true, nil
}

// keepClaim holds the claim on conn until released or the store closes
// (then ends the session, which releases the lock), taking it again on a
// new connection when conn is lost, every second until it has it: another
// replica's recovery look holds a free claim only for a moment (and waits
// for the claim to stay free for its grace before it ends a call).
func (s *Store) keepClaim(conn *pgx.Conn, id uuid.UUID, released <-chan struct{}) {
	defer func() {
		if conn != nil {
			closeConn(conn)
		}
	}()
	t := time.NewTicker(claimCheckEvery)
	defer t.Stop()
	contended := false
	for {
		select {
		case <-released:
			return
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if conn != nil {
			if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
				cancel()
				continue
			}
			closeConn(conn)
			conn = nil
			s.log.Warn("evidence/postgres: a run claim's connection was lost; taking the claim again", "approval_id", id)
		}
		c, ok, err := s.lockRun(ctx, id)
		cancel()
		switch {
		case err != nil:
			// The store is unreachable: try again at the next tick.
		case !ok:
			if !contended {
				contended = true
				s.log.Warn("evidence/postgres: a lost run claim is held by another process for now; trying again every second", "approval_id", id)
			}
		default:
			conn, contended = c, false
			s.log.Info("evidence/postgres: run claim taken again", "approval_id", id)
		}
	}
}

func closeConn(c *pgx.Conn) {
	// Ending the session releases its advisory locks.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

var _ evidence.RunLister = (*Store)(nil)
