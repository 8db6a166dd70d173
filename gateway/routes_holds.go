package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// holdRoutes registers the legal hold API: admins place and release holds,
// auditors and admins list them. Holds are chained evidence events written
// through the gateway's evidence writer (evidence.PlaceHold).
func (s *Server) holdRoutes(e *echo.Echo) {
	e.POST("/v1/evidence/holds", s.placeHold, s.require(wire.RoleAdmin))
	e.GET("/v1/evidence/holds", s.listHolds, s.require(wire.RoleAuditor, wire.RoleAdmin))
	e.POST("/v1/evidence/holds/:id/release", s.releaseHold, s.require(wire.RoleAdmin))
}

// holdStore is the evidence store, when it keeps legal holds (both stores
// do); found by type assertion like the Ledger.
func (s *Server) holdStore() (evidence.HoldStore, error) {
	hs, ok := s.opts.Receipts.(evidence.HoldStore)
	if !ok || s.opts.Evidence == nil {
		return nil, wire.Errorf(wire.CodeEvidenceUnavailable, "this gateway's evidence store does not keep legal holds")
	}
	return hs, nil
}

// readHoldBody decodes a JSON body strictly into v; the body is read
// through max_body_bytes like every other route's (more is too_large).
func (s *Server) readHoldBody(c echo.Context, v any) error {
	b, we := s.readBody(c)
	if we != nil {
		return we
	}
	if err := decodeStrict(b, v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return wire.FieldError(wire.CodeInvalidInput, te.Field, "%s has the wrong type: want %s", te.Field, holdFieldType(te.Field))
		case strings.Contains(err.Error(), "unknown field"):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return wire.FieldError(wire.CodeInvalidInput, field, "unknown field %q", field)
		case strings.Contains(err.Error(), "parsing time"):
			return wire.FieldError(wire.CodeInvalidInput, timeField(b), "since and until must be RFC 3339 times, e.g. 2025-01-01T00:00:00Z")
		}
		return wire.FieldError(wire.CodeInvalidInput, "body", "the body must be one JSON object")
	}
	return nil
}

func holdFieldType(field string) string {
	if field == "since" || field == "until" {
		return "an RFC 3339 time string"
	}
	return "a string"
}

// timeField names which of since and until failed to parse.
func timeField(b []byte) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) == nil {
		var probe wire.HoldRequest
		if v, ok := raw["since"]; ok && json.Unmarshal([]byte(`{"since":`+string(v)+`}`), &probe) != nil {
			return "since"
		}
		if _, ok := raw["until"]; ok {
			return "until"
		}
	}
	return "since"
}

// placeHold is POST /v1/evidence/holds (admin): 201 with the hold. The
// placer is the caller's principal, never a body field.
func (s *Server) placeHold(c echo.Context) error {
	hs, err := s.holdStore()
	if err != nil {
		return err
	}
	var req wire.HoldRequest
	if err := s.readHoldBody(c, &req); err != nil {
		return err
	}
	p, _ := principalOf(c)
	r := evidence.PlaceHoldRequest{Reason: req.Reason, PlacedBy: p.ID}
	if req.Since != nil {
		r.Since = *req.Since
	}
	if req.Until != nil {
		r.Until = *req.Until
	}
	h, err := evidence.PlaceHold(c.Request().Context(), hs, s.opts.Evidence, r)
	if err != nil {
		return err
	}
	s.log.InfoContext(c.Request().Context(), "legal hold placed", "hold_id", h.ID, "by", h.PlacedBy, "request_id", requestID(c))
	return c.JSON(http.StatusCreated, h)
}

// listHolds is GET /v1/evidence/holds[?active=true] (auditor, admin).
func (s *Server) listHolds(c echo.Context) error {
	q := c.QueryParams()
	for k := range q {
		if k != "active" {
			return wire.FieldError(wire.CodeInvalidInput, k, "unknown query parameter %q; accepted: active", k)
		}
	}
	active := false
	switch q.Get("active") {
	case "", "false":
	case "true":
		active = true
	default:
		return wire.FieldError(wire.CodeInvalidInput, "active", "active must be true or false")
	}
	hs, err := s.holdStore()
	if err != nil {
		return err
	}
	holds, err := evidence.ListHolds(c.Request().Context(), hs)
	if err != nil {
		return err
	}
	out := wire.HoldList{Holds: []wire.Hold{}}
	for _, h := range holds {
		if !active || h.Active {
			out.Holds = append(out.Holds, h)
		}
	}
	return c.JSON(http.StatusOK, out)
}

// releaseHold is POST /v1/evidence/holds/{id}/release (admin): 200 with
// the released hold; 404 when there is no such hold, 412 when it was
// already released.
func (s *Server) releaseHold(c echo.Context) error {
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return wire.FieldError(wire.CodeInvalidInput, "id", "hold id must be a UUID")
	}
	hs, err := s.holdStore()
	if err != nil {
		return err
	}
	var req wire.HoldReleaseRequest
	if err := s.readHoldBody(c, &req); err != nil {
		return err
	}
	p, _ := principalOf(c)
	h, err := evidence.ReleaseHold(c.Request().Context(), hs, s.opts.Evidence,
		evidence.ReleaseHoldRequest{ID: id, Reason: req.Reason, ReleasedBy: p.ID})
	if err != nil {
		return err
	}
	s.log.InfoContext(c.Request().Context(), "legal hold released", "hold_id", h.ID, "by", h.ReleasedBy, "request_id", requestID(c))
	return c.JSON(http.StatusOK, h)
}
