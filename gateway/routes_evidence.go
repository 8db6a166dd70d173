package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// EvidenceAuditor answers the evidence integrity routes: inclusion proofs
// against the latest signed checkpoint and the rollup's decision counts.
// evidence.Auditor implements it.
type EvidenceAuditor interface {
	ProveReceipt(ctx context.Context, id uuid.UUID) (wire.ReceiptProof, error)
	Stats(ctx context.Context, q evidence.StatsQuery) (wire.EvidenceStats, error)
}

// evidenceRoutes registers the evidence integrity API (proofs, stats).
func (s *Server) evidenceRoutes(e *echo.Echo) {
	e.GET("/v1/receipts/:id/proof", s.receiptProof, s.require(wire.RoleAuditor))
	e.GET("/v1/evidence/stats", s.evidenceStats, s.require(wire.RoleAuditor))
}

// errNoCheckpoints answers the integrity routes when this gateway keeps no
// checkpoints: both need the checkpointer, which needs a signing key.
func errNoCheckpoints() *wire.Error {
	return wire.Errorf(wire.CodeEvidenceUnavailable,
		"evidence checkpoints are off on this gateway (evidence.signing_key is not set), so there are no proofs or stats")
}

// receiptProof is GET /v1/receipts/{id}/proof. 412 precondition_failed
// means the receipt exists but the checkpointer has not yet signed a tree
// that covers its events; it is worth retrying after
// evidence.checkpoint_interval.
func (s *Server) receiptProof(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return wire.FieldError(wire.CodeInvalidInput, "id", "receipt id must be a UUID")
	}
	if s.opts.Auditor == nil {
		return errNoCheckpoints()
	}
	p, err := s.opts.Auditor.ProveReceipt(c.Request().Context(), id)
	if errors.Is(err, evidence.ErrNotCheckpointed) {
		return wire.Errorf(wire.CodePreconditionFailed, "receipt %s is not under a signed checkpoint yet; retry after the next checkpoint", id)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, p)
}

// evidenceStats is GET /v1/evidence/stats?since&until&interval=hour|day&top.
// since defaults to 24 hours before until, until to now; top (rule ids
// listed per bucket in by_rule) to evidence.DefaultStatsTop.
func (s *Server) evidenceStats(c echo.Context) error {
	q := c.QueryParams()
	for k := range q {
		if k != "since" && k != "until" && k != "interval" && k != "top" {
			return wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: since, until, interval, top", k)
		}
	}
	sq := evidence.StatsQuery{Interval: q.Get("interval"), Until: s.opts.Now().UTC()}
	if sq.Interval != "" && sq.Interval != "hour" && sq.Interval != "day" {
		return wire.FieldError(wire.CodeInvalidInput, "interval", "interval must be hour or day")
	}
	if v := q.Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > evidence.MaxStatsTop {
			return wire.FieldError(wire.CodeInvalidInput, "top", "top must be an integer from 1 to %d", evidence.MaxStatsTop)
		}
		sq.Top = n
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &sq.Since}, {"until", &sq.Until}} {
		if v := q.Get(t.name); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return wire.FieldError(wire.CodeInvalidInput, t.name, "%s must be an RFC 3339 time, e.g. 2026-11-22T10:00:00Z", t.name)
			}
			*t.dst = ts
		}
	}
	if sq.Since.IsZero() {
		sq.Since = sq.Until.Add(-24 * time.Hour)
	}
	if !sq.Until.After(sq.Since) {
		return wire.FieldError(wire.CodeInvalidInput, "until", "until must be after since")
	}
	if s.opts.Auditor == nil {
		return errNoCheckpoints()
	}
	st, err := s.opts.Auditor.Stats(c.Request().Context(), sq)
	if errors.Is(err, evidence.ErrBadFilter) {
		return wire.FieldError(wire.CodeInvalidInput, "since", "%s", err.Error())
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, st)
}
