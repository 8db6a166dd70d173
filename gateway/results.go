package gateway

import (
	"context"

	"github.com/portcullis/portcullis/backends"
	"github.com/portcullis/portcullis/backends/readresult"
	"github.com/portcullis/portcullis/evidence/results"
)

// ResultKeeper keeps the full output of finished calls for
// read_tool_result (evidence/results.Store).
type ResultKeeper interface {
	Save(r results.Record) error
	Run(ctx context.Context)
}

// keepResult hands a finished allowed call's output to the result store,
// for read_tool_result; the receipt keeps only its digest. Calls without a
// session and read_tool_result's own answers are not kept. A failure to
// keep it never fails the call: it is logged, and reading it back later
// answers not_found.
func (s *Server) keepResult(ctx context.Context, rec *record, tool string, res backends.Result) {
	if s.opts.Results == nil || rec.req.SessionID == "" || tool == readresult.Name {
		return
	}
	err := s.opts.Results.Save(results.Record{ReceiptID: rec.id, PrincipalID: rec.principal.ID, SessionID: rec.req.SessionID,
		Tool: tool, Time: rec.at, Output: res.Output})
	if err != nil {
		s.log.WarnContext(ctx, "result not kept for read_tool_result", "receipt_id", rec.id, "err", err)
	}
}
