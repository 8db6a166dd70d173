package wire

import "time"

// HoldRequest is the body of POST /v1/evidence/holds: a legal hold on the
// evidence of [since, until). until absent or null: open-ended. Who places
// it comes from the API key, never from the body.
type HoldRequest struct {
	Since  *time.Time `json:"since"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason"`
}

// HoldReleaseRequest is the body of POST /v1/evidence/holds/{id}/release.
type HoldReleaseRequest struct {
	Reason string `json:"reason"`
}

// Hold is one legal hold as the evidence records it: placed by a chained
// legal_hold event, released (if ever) by a chained legal_hold_release
// event. While Active, `gateway evidence retain` keeps every month of
// evidence the hold overlaps.
type Hold struct {
	// ID is the id of the legal_hold event that placed it (a UUIDv7).
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
	// Until is exclusive; null means open-ended.
	Until    *time.Time `json:"until"`
	Reason   string     `json:"reason"`
	PlacedBy string     `json:"placed_by"`
	PlacedAt time.Time  `json:"placed_at"`
	Active   bool       `json:"active"`
	// The release, when Active is false.
	ReleasedBy    string     `json:"released_by,omitempty"`
	ReleasedAt    *time.Time `json:"released_at,omitempty"`
	ReleaseReason string     `json:"release_reason,omitempty"`
	// ReleaseEventID is the id of the legal_hold_release event.
	ReleaseEventID string `json:"release_event_id,omitempty"`
}

// HoldList is the body of GET /v1/evidence/holds, oldest placement first.
type HoldList struct {
	Holds []Hold `json:"holds"`
}
