package wire

import "time"

// ApprovalRequirement is a decision's approval part: the policy allows
// the call only once a person approves it (contract section 9).
type ApprovalRequirement struct {
	Required bool   `json:"required"`
	Reason   string `json:"reason"`
	// Approvers name who may decide: "role:<role>" or "principal:<id>".
	// Empty means any approver (role approver or admin).
	Approvers []string `json:"approvers"`
	// TTLS is how long the call stays parked, in seconds.
	TTLS int `json:"ttl_s"`
}

// Approval bounds.
const (
	DefaultApprovalTTLS = 900
	MaxApprovalTTLS     = 7 * 24 * 3600
	MaxApprovers        = 32
	MaxApprovalReason   = 1024
)

// Approval statuses.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
	// ApprovalStopped: approved, but the live policy no longer allowed it
	// when it was re-decided, so it did not run.
	ApprovalStopped = "stopped"
)

// ApprovalRef is the approval a tool-call answer names.
type ApprovalRef struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Approval is one parked call as GET /v1/approvals lists it. Args is the
// redacted copy the receipt holds; the exact input stays in the store.
type Approval struct {
	ID             string         `json:"id"`
	ReceiptID      string         `json:"receipt_id"`
	Status         string         `json:"status"`
	PrincipalID    string         `json:"principal_id"`
	Tool           string         `json:"tool"`
	Args           map[string]any `json:"args"`
	ArgsSHA256     string         `json:"args_sha256"`
	CallID         string         `json:"call_id,omitempty"`
	SessionID      string         `json:"session_id,omitempty"`
	PolicyRevision string         `json:"policy_revision"`
	Reason         string         `json:"reason"`
	Approvers      []string       `json:"approvers"`
	CreatedAt      time.Time      `json:"created_at"`
	ExpiresAt      time.Time      `json:"expires_at"`
	DecidedBy      string         `json:"decided_by,omitempty"`
	DecidedAt      *time.Time     `json:"decided_at,omitempty"`
	DecisionReason string         `json:"decision_reason,omitempty"`
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// ApprovalDecision is the body of POST /v1/approvals/{id}.
type ApprovalDecision struct {
	Decision string `json:"decision"` // "approve" or "reject"
	Reason   string `json:"reason"`
}

// ApprovalResult is the body of POST /v1/approvals/{id}: the approval as
// it now stands and the call's final answer (the run's, for an approval),
// with the HTTP status that answer carries.
type ApprovalResult struct {
	Approval Approval         `json:"approval"`
	Result   ToolCallResponse `json:"result"`
	Status   int              `json:"status"`
}

// Quota is one counter a decision draws on (contract section 10): at most
// Limit units of cost per fixed window of WindowS seconds under Key.
type Quota struct {
	Key     string `json:"key"`
	Limit   int64  `json:"limit"`
	WindowS int64  `json:"window_s"`
	Cost    int64  `json:"cost"`
}

// Quota bounds.
const (
	MaxQuotas       = 8
	MaxQuotaKeyLen  = 256
	MaxQuotaWindowS = 366 * 24 * 3600
)

// QuotaUsage is one window of a quota key, as GET /v1/quotas shows it.
type QuotaUsage struct {
	Key         string    `json:"key"`
	WindowStart time.Time `json:"window_start"`
	WindowS     int64     `json:"window_s"`
	Used        int64     `json:"used"`
	Limit       int64     `json:"limit"`
}

// QuotaList is the body of GET /v1/quotas.
type QuotaList struct {
	Quotas []QuotaUsage `json:"quotas"`
}
