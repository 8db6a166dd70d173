package gateway

import (
	"context"
	"sync"

	"github.com/portcullis/portcullis/evidence/results"
	"github.com/portcullis/portcullis/tools"
	"github.com/portcullis/portcullis/tools/readresult"
	"github.com/portcullis/portcullis/wire"
)

// ResultKeeper keeps the full output of finished calls for
// read_tool_result (evidence/results.Store).
type ResultKeeper interface {
	// Save queues a result and returns at once; the output must not be
	// changed afterwards (the pipeline only encodes it for the answer).
	Save(r results.Record) error
	Run(ctx context.Context)
}

// resultGrants caches, per policy revision, whether a principal may call
// read_tool_result: results are kept only for principals who may read
// them back (no copy of an output is made for nobody to read).
type resultGrants struct {
	mu       sync.Mutex
	revision string
	may      map[string]bool
}

// maxResultGrants bounds the cache (principals of one revision).
const maxResultGrants = 10000

// keepResult hands a finished allowed call's output to the result store,
// for read_tool_result; the receipt keeps only its digest. Kept only when
// the call named a session, is not read_tool_result's own answer, and the
// principal may call read_tool_result (asked of the policy as GET
// /v1/tools asks, purpose "list", once per principal and revision). A
// result that cannot be kept never fails the call: reading it back later
// answers not_found.
func (s *Server) keepResult(ctx context.Context, rec *record, tool string, res tools.Result) {
	if s.opts.Results == nil || rec.req.SessionID == "" || tool == readresult.Name {
		return
	}
	if _, ok := s.tools[readresult.Name]; !ok || !s.mayReadResults(ctx, rec.principal) {
		return
	}
	if err := s.opts.Results.Save(results.Record{ReceiptID: rec.id, PrincipalID: rec.principal.ID, SessionID: rec.req.SessionID,
		Tool: tool, Time: rec.at, Output: res.Output}); err != nil {
		s.log.WarnContext(ctx, "result not kept for read_tool_result", "receipt_id", rec.id, "err", err)
	}
}

func (s *Server) mayReadResults(ctx context.Context, p wire.Principal) bool {
	rev := s.opts.PolicyRevision()
	g := &s.resultGrants
	g.mu.Lock()
	if g.may == nil || g.revision != rev || len(g.may) >= maxResultGrants {
		g.revision, g.may = rev, map[string]bool{}
	}
	may, ok := g.may[p.ID]
	g.mu.Unlock()
	if ok {
		return may
	}
	d, err := s.opts.Policy.Decide(ctx, wire.PolicyInput{Principal: p, Tool: readresult.Name, Purpose: wire.PurposeList,
		Args: map[string]any{}, Resolved: map[string]any{}, Time: s.opts.Now().UTC()})
	may = err == nil && d.Allow
	if err == nil {
		g.mu.Lock()
		if g.revision == rev {
			g.may[p.ID] = may
		}
		g.mu.Unlock()
	}
	return may
}
