// Package evidence records what the gateway decided and what then happened,
// as append-only events that no one — not even the database owner through
// the application's role — can change afterwards. It holds the event model,
// the Store interface both stores implement, the group-commit Writer that
// makes events durable before a call is dispatched, the per-process hash
// chain that makes tampering evident, and the redaction that keeps secrets
// out of evidence.
package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/portcullis/portcullis/wire"
)

// Event kinds. A receipt is one decision event plus its latest outcome
// event; a chain_start event opens each writer process's hash chain. The
// other kinds are chained like any event but are never receipts: their
// content is Body.
const (
	KindDecision   = "decision"
	KindOutcome    = "outcome"
	KindChainStart = "chain_start"
	// KindPolicyActivated records a policy revision becoming active (who,
	// which revision, from which bundle: in Body).
	KindPolicyActivated = "policy_activated"
	// KindShadowDiff records where a shadow policy decided differently
	// from the active one.
	KindShadowDiff = "shadow_diff"
	// KindCheckpoint is reserved for recording signed checkpoints in the
	// chain; this build keeps checkpoints in their own table instead.
	KindCheckpoint = "checkpoint"
	// KindRetention records, before it happens, that expired evidence is
	// being dropped, so verification can tell a sanctioned gap from a
	// deletion.
	KindRetention = "retention"
	// KindLegalHold records a legal hold being placed on a time range of
	// evidence (HoldBody); retention keeps every month it overlaps.
	KindLegalHold = "legal_hold"
	// KindLegalHoldRelease records a legal hold being released
	// (HoldReleaseBody).
	KindLegalHoldRelease = "legal_hold_release"
)

// Errors a Store returns, so callers can map them once at the edge.
var (
	// ErrNotFound means no receipt has that id (gateway: 404 not_found).
	ErrNotFound = errors.New("evidence: not found")
	// ErrNotCheckpointed means the evidence exists but no signed checkpoint
	// covers it yet, so no proof can be given (gateway: 412
	// precondition_failed; retry after evidence.checkpoint_interval).
	ErrNotCheckpointed = errors.New("evidence: not under a signed checkpoint yet")
	// ErrUnavailable wraps store connectivity failures: the gateway maps it
	// to 503 evidence_unavailable and refuses to dispatch (fail closed).
	ErrUnavailable = errors.New("evidence: store unavailable")
	// ErrBadCursor means a pagination cursor was not one this package made
	// (gateway: 400 invalid_input).
	ErrBadCursor = errors.New("evidence: malformed cursor")
	// ErrBadFilter means a filter value is out of range (gateway:
	// invalid_input).
	ErrBadFilter = errors.New("evidence: bad filter")
	// ErrInvalidEvent means an event handed to the Writer or a Store breaks
	// the event model; it is a caller bug, never a store failure.
	ErrInvalidEvent = errors.New("evidence: invalid event")
	// ErrClosed means the Writer was closed before the events were taken.
	ErrClosed = errors.New("evidence: writer closed")
	// ErrNoStore means there is no evidence store where one was expected:
	// the database is missing, empty or holds no evidence schema. Opening
	// a store for verification returns it instead of creating one.
	ErrNoStore = errors.New("evidence: no evidence store")
	// ErrSchemaMismatch means the store's schema is not the one this
	// binary knows (older: run `gateway migrate`; newer: use the newer
	// binary). Verification never migrates.
	ErrSchemaMismatch = errors.New("evidence: store schema version does not match this binary")
	// ErrChainBroken means a hash chain does not verify: an event was
	// altered, removed, reordered or inserted.
	ErrChainBroken = errors.New("evidence: hash chain broken")
)

// Event is one append-only evidence event. Callers fill the content fields;
// the Writer fills InstanceID and the integrity fields (ChainID, ChainSeq,
// PrevHash, Hash), which callers must leave alone.
type Event struct {
	// ID is a UUIDv7, so ids sort by creation time.
	ID uuid.UUID
	// ReceiptID is the receipt this event belongs to: ID itself for a
	// decision (and a chain_start), the decision's ID for an outcome.
	ReceiptID uuid.UUID
	// Kind is one of the Kind constants.
	Kind string
	// Time is when the event happened, UTC with microsecond precision once
	// the Writer has normalized it.
	Time time.Time
	// InstanceID names the gateway instance that wrote the event.
	InstanceID string

	// Decision-event fields.
	PrincipalID     string
	SessionID       string
	CallID          string
	Tool            string
	Decision        string // wire.DecisionAllow, DecisionDeny or DecisionInvalid
	Reasons         []string
	PolicyRevision  string
	ArgsSHA256      string
	Args            json.RawMessage // already redacted; for chain_start, the link to the previous chain
	Scope           *wire.Scope
	TraceID         string
	ParentReceiptID *uuid.UUID
	ErrorCode       string // contract code for deny/invalid decisions
	// RuleIDs name the policy rules behind the decision (wire.Decision
	// RuleIDs); nil when there are none.
	RuleIDs []string

	// Outcome-event fields.
	Outcome *wire.Outcome

	// Body is the content of the non-receipt kinds (policy_activated,
	// shadow_diff, checkpoint, retention): JSON, kept as the exact bytes
	// written so the chain hash recomputes. Nil for decisions and outcomes.
	Body json.RawMessage

	// Integrity fields, set by the Writer only.
	ChainID  uuid.UUID
	ChainSeq int64
	PrevHash []byte
	Hash     []byte
}

// Store keeps evidence events. Implementations: evidence/postgres and
// evidence/sqlite. Both pass evidence/storetest.
type Store interface {
	// Append writes events in one transaction, all or nothing. It is
	// idempotent on event ID: re-appending events after an unknown commit
	// result never duplicates them.
	Append(ctx context.Context, events []Event) error
	// Receipt returns one receipt; ErrNotFound when there is none.
	Receipt(ctx context.Context, id uuid.UUID) (wire.Receipt, error)
	// Receipts lists receipts newest first, filtered and paginated.
	Receipts(ctx context.Context, f Filter) (wire.ReceiptList, error)
	// PendingDecisions lists the allow decisions of an instance that have no
	// outcome event: calls that were dispatched when the instance died.
	PendingDecisions(ctx context.Context, instanceID string) ([]uuid.UUID, error)
	// ChainHead returns the last chained event the instance wrote (its
	// newest chain, highest sequence), so a new chain can link to it. A
	// zero chainID, 0 and nil mean the instance never wrote one.
	ChainHead(ctx context.Context, instanceID string) (chainID uuid.UUID, seq int64, hash []byte, err error)
	// ChainEvents returns one chain's events in sequence order, for
	// verification.
	ChainEvents(ctx context.Context, chainID uuid.UUID) ([]Event, error)
	// Ping checks the store is reachable (for /readyz).
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// Pagination bounds of Filter.Limit.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Filter selects receipts for GET /v1/receipts (contract section 6). Empty
// fields do not filter. Since is inclusive, Until exclusive.
type Filter struct {
	Principal string
	Tool      string
	Decision  string
	SessionID string
	// Status selects receipts whose outcome status (of their latest
	// outcome; pending: none yet) is this wire.Status* value.
	Status string
	// ErrorCode selects receipts whose latest outcome has this contract
	// error code.
	ErrorCode string
	// Rule selects receipts whose decision names this rule id.
	Rule string
	// Text selects receipts whose recorded arguments (the redacted copy)
	// or reasons contain it as written inside their JSON strings: case is
	// ignored for ASCII letters (for all letters on PostgreSQL). At most
	// MaxTextLen bytes of UTF-8 without NUL or control characters.
	Text  string
	Since time.Time
	Until time.Time
	// Limit is the page size: DefaultLimit when zero or negative, at most
	// MaxLimit.
	Limit int
	// Cursor is the NextCursor of the previous page, or empty.
	Cursor string
}
