// Package wire is the public vocabulary of Portcullis: the shapes that cross the
// REST API, reach Rego policies and land in evidence. It imports nothing of the
// project so that the gateway, the stores, the backends and the SDKs all speak
// exactly the same words.
package wire

import (
	"encoding/json"
	"time"
)

// ToolCallRequest is the body of POST /v1/tool-calls and POST /v1/decisions.
type ToolCallRequest struct {
	Tool      string          `json:"tool"`
	Input     json.RawMessage `json:"input"`
	CallID    string          `json:"call_id,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
}

// ToolCallResponse is the body of every POST /v1/tool-calls answer, success or
// failure, so SDKs parse one shape.
type ToolCallResponse struct {
	ReceiptID string          `json:"receipt_id,omitempty"`
	CallID    string          `json:"call_id,omitempty"`
	Decision  *DecisionResult `json:"decision"`
	Output    ToolOutput      `json:"output"`
	// Approval is set while a call is parked for a person's approval and
	// on the final answer of a call that was (contract section 9).
	Approval *ApprovalRef `json:"approval,omitempty"`
}

// DecisionResult is the part of a decision an agent sees in a tool-call answer.
type DecisionResult struct {
	Allow          bool     `json:"allow"`
	Reasons        []string `json:"reasons"`
	PolicyRevision string   `json:"policy_revision"`
}

// DryRunResponse is the body of a POST /v1/decisions answer.
type DryRunResponse struct {
	Decision Decision `json:"decision"`
	Scope    *Scope   `json:"scope"`
	// Error is set when a real call would be refused after validation: the
	// policy denied it (permission_denied) or enforcement refused it
	// (fs_denied, sandbox_violation ...). Invalid input answers 4xx instead.
	Error *Error `json:"error,omitempty"`
	// Explanation says which rules produced each denial reason (dry runs
	// only: tracing is too costly for the call path).
	Explanation []ReasonSource `json:"explanation,omitempty"`
}

// ReasonSource is one denial reason and the rules that produced it, each as
// "data.pkg.rule (file:row)".
type ReasonSource struct {
	Reason string   `json:"reason"`
	Rules  []string `json:"rules"`
}

// PolicyStatus is the body of GET /v1/policy: the live bundle.
type PolicyStatus struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest"`
	Source   string `json:"source"`
	// KeyID and Algorithm name the verified signature; empty when the
	// gateway runs without policy.verification_key.
	KeyID     string    `json:"key_id,omitempty"`
	Algorithm string    `json:"algorithm,omitempty"`
	Verified  bool      `json:"verified"`
	LoadedAt  time.Time `json:"loaded_at"`
	Files     []string  `json:"files"`
	// Activations counts bundles activated since the gateway started.
	Activations int           `json:"activations"`
	LastReload  *PolicyReload `json:"last_reload,omitempty"`
}

// PolicyReload is the body of POST /v1/policy/reload: what one reload did.
type PolicyReload struct {
	// Status is activated, unchanged or refused (the previous bundle stays).
	Status string `json:"status"`
	// Reason is the refusal stage: fetch, read, signature, compile, tests.
	Reason   string    `json:"reason,omitempty"`
	Error    string    `json:"error,omitempty"`
	Revision string    `json:"revision"`
	Digest   string    `json:"digest"`
	At       time.Time `json:"at"`
}

// CompactJSON is JSON exactly as encoding/json's Marshal wrote it: valid,
// compact and HTML-escaped. A tool that encodes its data itself returns it
// as ToolOutput.Data of this type, and the gateway writes it into the
// answer as it is instead of scanning it again.
type CompactJSON []byte

// MarshalJSON returns j itself (null when nil).
func (j CompactJSON) MarshalJSON() ([]byte, error) {
	if j == nil {
		return []byte("null"), nil
	}
	return j, nil
}

// ToolOutput is the standard result of every tool.
type ToolOutput struct {
	Success  bool           `json:"success"`
	Data     any            `json:"data"`
	Error    *Error         `json:"error"`
	Metadata map[string]any `json:"metadata"`
}

// ErrorBody is the body of non-tool-call endpoints when they fail.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Principal is an authenticated caller. Identity comes only from its key.
type Principal struct {
	ID         string         `json:"id"`
	Roles      []string       `json:"roles"`
	Attributes map[string]any `json:"attributes"`
}

// HasRole reports whether p holds role r.
func (p Principal) HasRole(r string) bool {
	for _, have := range p.Roles {
		if have == r {
			return true
		}
	}
	return false
}

// Roles a principal may hold.
const (
	RoleAgent   = "agent"
	RoleAuditor = "auditor"
	RoleAdmin   = "admin"
	// RoleApprover may decide parked calls (contract section 9).
	RoleApprover = "approver"
)

// Purposes of a policy evaluation.
const (
	PurposeCall   = "call"
	PurposeDryRun = "dry_run"
	PurposeList   = "list"
	// PurposeLaunch asks for the scope a stdio upstream MCP server runs
	// in (tool "<upstream>", principal "upstream:<upstream>").
	PurposeLaunch = "launch"
)

// PolicyInput is the document a Rego policy sees as `input`.
type PolicyInput struct {
	Principal Principal      `json:"principal"`
	Tool      string         `json:"tool"`
	Purpose   string         `json:"purpose"`
	Args      map[string]any `json:"args"`
	Resolved  map[string]any `json:"resolved"`
	SessionID string         `json:"session_id"`
	CallID    string         `json:"call_id"`
	Time      time.Time      `json:"time"`
}

// Decision is what the policy returned, with safe defaults filled in.
type Decision struct {
	Allow          bool      `json:"allow"`
	Reasons        []string  `json:"reasons"`
	FSGrants       []FSGrant `json:"fs_grants"`
	Network        Network   `json:"network"`
	Env            EnvPolicy `json:"env"`
	Limits         Limits    `json:"limits"`
	PolicyRevision string    `json:"policy_revision"`
	// FSDeny lists paths the OS sandbox hides even inside the grants, on
	// top of the built-in ones (~/.ssh, .env files ...).
	FSDeny []string `json:"fs_deny,omitempty"`
	// Exec is what the policy decided about how an Exec call's argv runs:
	// arguments the gateway forces in, which arguments name paths, and
	// what the program may execute. Nil for other tools and for profiles
	// that take any argv.
	Exec *ExecPlan `json:"exec,omitempty"`
	// RuleIDs name the policy rules that produced the decision: for a deny
	// the rules that fired, for an allow the grant and Exec shape(s) that
	// allowed it. Stable identifiers chosen by the policy author (see
	// ValidRuleID); absent when the policy names none.
	RuleIDs []string `json:"rule_ids,omitempty"`
	// Approval, when Required, parks an allowed call until a person
	// approves it (contract section 9; approval.go).
	Approval *ApprovalRequirement `json:"approval,omitempty"`
	// Quotas are the counters an allowed call draws on before it runs
	// (contract section 10; quota.go).
	Quotas []Quota `json:"quotas,omitempty"`
}

// ExecPlan is the Exec part of a decision, and of the enforced scope. The
// caller's argv is never changed; the gateway only inserts the forced
// arguments, so what the caller asked for stays what is checked.
type ExecPlan struct {
	// Insert are arguments the gateway inserts into the caller's argv:
	// each entry's Args go right before the caller's argument At (1 to
	// len(argv); len(argv) appends). They are the profile's hardening
	// (python3 -I, ruff --isolated ...); the caller can neither remove nor
	// reorder them. "${HOME}" in them becomes the call's private HOME.
	Insert []ArgInsert `json:"insert,omitempty"`
	// PathArgs are the caller's arguments that name files: each is
	// resolved against cwd (symlinks followed) and must lie in an fs grant
	// and outside every secret-shaped name and fs_deny path, or the call
	// is refused (fs_denied) before anything runs.
	PathArgs []PathArg `json:"path_args,omitempty"`
	// ExecRestrict limits what the program (and all it starts) may
	// execute to itself, its interpreter and ExecAllow.
	ExecRestrict bool `json:"exec_restrict,omitempty"`
	// ExecAllow are further files or directories the program may execute
	// under ExecRestrict: absolute, or relative to the directory of
	// argv[0]'s real path (go vet: "../pkg/tool"). In the scope, the
	// resolved list the runner was given.
	ExecAllow []string `json:"exec_allow,omitempty"`
}

// ArgInsert is one run of forced arguments (ExecPlan.Insert).
type ArgInsert struct {
	At   int      `json:"at"`
	Args []string `json:"args"`
}

// PathArg is one argument that names a path (ExecPlan.PathArgs): argv[Index]
// itself, or with Value, the part after its first "=" (an option's value,
// --config=FILE).
type PathArg struct {
	Index int  `json:"index"`
	Value bool `json:"value,omitempty"`
}

// Bounds of ExecPlan.
const (
	MaxInsertArgs = 64
	MaxPathArgs   = 4096
	MaxExecAllow  = 32
)

// Bounds of Decision.RuleIDs.
const (
	MaxRuleIDs   = 32
	MaxRuleIDLen = 128
)

// ValidRuleID reports whether s is a well-formed rule id: 1 to
// MaxRuleIDLen bytes of A-Z a-z 0-9 _ . : / -. The characters are safe
// in URLs, CSV cells and log lines unquoted.
func ValidRuleID(s string) bool {
	if len(s) == 0 || len(s) > MaxRuleIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == ':', c == '/', c == '-':
		default:
			return false
		}
	}
	return true
}

// FSGrant gives a call access to a directory tree.
type FSGrant struct {
	Path  string `json:"path"`
	Mode  string `json:"mode"` // "r" or "rw"
	Alias string `json:"alias,omitempty"`
	// AllowAutorun lifts the autorun guard (sandbox.AutorunPath) for this
	// grant: shell rc files, git hooks, CI workflows and editor task files
	// in it become writable like any other file. Off unless the policy
	// says so explicitly.
	AllowAutorun bool `json:"allow_autorun,omitempty"`
}

// Grant modes.
const (
	ModeRead      = "r"
	ModeReadWrite = "rw"
)

// AliasState is the alias of a per-run state directory: a grant with it
// carries no path from the policy; the gateway binds it to a private
// directory of the call's principal and session (docs/policies.md).
const AliasState = "@state"

// Network is the network posture a call is given.
type Network struct {
	Posture string   `json:"posture"` // off | allowlist | full
	Allow   []string `json:"allow"`
}

// Network postures.
const (
	PostureOff       = "off"
	PostureAllowlist = "allowlist"
	PostureFull      = "full"
)

// EnvPolicy says which gateway variables pass through and which are set.
type EnvPolicy struct {
	Pass []string          `json:"pass"`
	Set  map[string]string `json:"set"`
}

// Limits bound the resources of one call. Zero means "use the default".
type Limits struct {
	TimeoutS       int   `json:"timeout_s,omitempty"`
	CPUSeconds     int   `json:"cpu_seconds,omitempty"`
	MemoryBytes    int64 `json:"memory_bytes,omitempty"`
	FsizeBytes     int64 `json:"fsize_bytes,omitempty"`
	Nofile         int   `json:"nofile,omitempty"`
	MaxOutputBytes int   `json:"max_output_bytes,omitempty"`
}

// Scope is the enforced scope: what the call was actually given. It is what
// the receipt records and what the sandbox is built from.
type Scope struct {
	FSGrants []FSGrant `json:"fs_grants"`
	Network  Network   `json:"network"`
	EnvNames []string  `json:"env_names"`
	Limits   Limits    `json:"limits"`
	Backend  string    `json:"backend,omitempty"`
	// FSDeny is the decision's fs_deny, carried to the OS sandbox, which
	// hides these paths even inside the grants.
	FSDeny []string `json:"fs_deny,omitempty"`
	// Exec is the Exec plan the call ran under: the forced arguments,
	// the path arguments that were checked, and the exec restriction with
	// its resolved allow list.
	Exec *ExecPlan `json:"exec,omitempty"`
	// MemoryLimit says how Limits.MemoryBytes is enforced (Exec,
	// code.run): MemoryLimitCgroup or MemoryLimitRlimitData. The runner
	// applies exactly this mechanism or refuses to run the call.
	MemoryLimit string `json:"memory_limit,omitempty"`
}

// How a call's memory_bytes is enforced (Scope.MemoryLimit).
const (
	// MemoryLimitCgroup: the call's own memory cgroup (memory.max on
	// cgroup v2, memory.limit_in_bytes on v1) bounds the memory all its
	// processes use together; the kernel kills the call past it.
	MemoryLimitCgroup = "cgroup"
	// MemoryLimitRlimitData: RLIMIT_DATA bounds each process' data
	// (private writable mappings: heap, anonymous memory), when no memory
	// cgroup is available. Address-space reservations that are never made
	// writable (Go's, V8's) do not count, unlike RLIMIT_AS.
	MemoryLimitRlimitData = "rlimit_data"
)

// Receipt decisions.
const (
	DecisionAllow   = "allow"
	DecisionDeny    = "deny"
	DecisionInvalid = "invalid"
)

// Outcome statuses.
const (
	StatusPending     = "pending"
	StatusSucceeded   = "succeeded"
	StatusFailed      = "failed"
	StatusTimedOut    = "timed_out"
	StatusError       = "error"
	StatusInterrupted = "interrupted"
)

// Receipt is one call's evidence as the API returns it.
type Receipt struct {
	ID          string    `json:"id"`
	Time        time.Time `json:"time"`
	PrincipalID string    `json:"principal_id"`
	SessionID   string    `json:"session_id"`
	CallID      string    `json:"call_id"`
	Tool        string    `json:"tool"`
	Decision    string    `json:"decision"`
	Reasons     []string  `json:"reasons"`
	// RuleIDs are the decision's rule ids (Decision.RuleIDs); always an
	// array, empty for receipts written before rule ids existed.
	RuleIDs         []string        `json:"rule_ids"`
	PolicyRevision  string          `json:"policy_revision"`
	ArgsSHA256      string          `json:"args_sha256"`
	Args            json.RawMessage `json:"args"`
	Scope           *Scope          `json:"scope"`
	Outcome         *Outcome        `json:"outcome"`
	TraceID         string          `json:"trace_id"`
	ParentReceiptID *string         `json:"parent_receipt_id"`
	// InstanceID names the gateway instance that decided the call.
	InstanceID string `json:"instance_id"`
	// CompletedAt and DurationMS repeat the outcome's time and duration at
	// top level for auditors' tabular tools; null while pending.
	CompletedAt *time.Time `json:"completed_at"`
	DurationMS  *int64     `json:"duration_ms"`
	// Chain places the decision event in its hash chain; null only for
	// events written before chaining existed.
	Chain *ReceiptChain `json:"chain"`
}

// Outcome is how a call ended.
type Outcome struct {
	Status       string     `json:"status"`
	ErrorCode    *string    `json:"error_code"`
	ExitCode     *int       `json:"exit_code"`
	OutputSHA256 string     `json:"output_sha256"`
	DurationMS   int64      `json:"duration_ms"`
	Backend      string     `json:"backend"`
	Time         *time.Time `json:"time,omitempty"`
	// Network attributes the call's proxied connections (posture
	// allowlist); absent when nothing was proxied.
	Network *NetworkStats `json:"network,omitempty"`
}

// NetworkStats is what one call's egress proxy saw.
type NetworkStats struct {
	// Connections counts proxied connection requests, allowed or not.
	Connections int `json:"connections"`
	// Allowed and Refused list the distinct host:port targets, in first-
	// seen order, as the program asked for them (a name, or an IP literal).
	Allowed []string `json:"allowed"`
	Refused []string `json:"refused"`
	// Denials says why each refused target was refused, keyed by target.
	Denials map[string]string `json:"denials,omitempty"`
	// BytesOut and BytesIn count tunneled payload bytes.
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
}

// ReceiptList is the body of GET /v1/receipts.
type ReceiptList struct {
	Receipts   []Receipt `json:"receipts"`
	NextCursor string    `json:"next_cursor"`
}

// ToolList is the body of GET /v1/tools: OpenAI function tools, each named
// by its model-safe name (ModelSafeName), and Names mapping every listed
// model-safe name back to the tool's own name.
type ToolList struct {
	Tools []FunctionTool    `json:"tools"`
	Names map[string]string `json:"names"`
}

// FunctionTool is one tool in the OpenAI function-tool shape.
type FunctionTool struct {
	Type     string       `json:"type"`
	Function FunctionSpec `json:"function"`
}

// FunctionSpec describes a callable function to a model.
type FunctionSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ReceiptChain is where a receipt's decision event sits in its hash chain,
// so an auditor can recompute it with `gateway evidence verify` or ask for
// its inclusion proof.
type ReceiptChain struct {
	ID   string `json:"id"`
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
}

// InclusionProof proves that one evidence event is leaf LeafIndex of the
// Merkle tree a signed checkpoint commits to (RFC 6962). It is self-
// contained: with the log's verifier key nothing else is needed to check
// it (evidence.VerifyInclusion).
type InclusionProof struct {
	// Checkpoint is the signed note (C2SP tlog-checkpoint).
	Checkpoint string `json:"checkpoint"`
	// TreeSize repeats the checkpoint's size for convenience.
	TreeSize int64 `json:"tree_size"`
	// EventID is the event proven.
	EventID string `json:"event_id"`
	// EventHash is the event's chain hash (hex), the leaf's data.
	EventHash string `json:"event_hash"`
	// LeafIndex is the event's position in the tree.
	LeafIndex int64 `json:"leaf_index"`
	// LeafHash is the RFC 6962 leaf hash (hex): SHA-256(0x00 || event hash).
	LeafHash string `json:"leaf_hash"`
	// Proof is the RFC 6962 audit path, hex hashes, leaf to root.
	Proof []string `json:"proof"`
}

// ReceiptProof is GET /v1/receipts/{id}/proof: inclusion proofs of the
// receipt's decision event and, when one was recorded, of the outcome event
// the receipt shows, both against the same signed checkpoint.
type ReceiptProof struct {
	ReceiptID string `json:"receipt_id"`
	// VerifierKey is the note verifier key (name+hash+key) the checkpoint
	// is signed with. An auditor should pin it out of band rather than
	// trust the copy served next to the proof.
	VerifierKey string          `json:"verifier_key"`
	Checkpoint  string          `json:"checkpoint"`
	TreeSize    int64           `json:"tree_size"`
	Decision    InclusionProof  `json:"decision"`
	Outcome     *InclusionProof `json:"outcome"`
}

// StatsBucket is one interval's counts of checkpointed decisions.
type StatsBucket struct {
	Start       time.Time        `json:"start"`
	Total       int64            `json:"total"`
	ByDecision  map[string]int64 `json:"by_decision"`
	ByTool      map[string]int64 `json:"by_tool"`
	ByPrincipal map[string]int64 `json:"by_principal"`
	// ByToolDecision counts per tool, then per decision:
	// {"Exec": {"allow": 3, "deny": 1}}. Each tool's counts sum to its
	// ByTool count.
	ByToolDecision map[string]map[string]int64 `json:"by_tool_decision"`
	// ByRule counts decisions per rule id: a decision with several rule ids
	// counts once under each, one without any counts under none. Only the
	// most frequent ids (the stats query's top) are listed; the rest are
	// summed under StatsOtherRules.
	ByRule map[string]int64 `json:"by_rule"`
}

// StatsOtherRules is the ByRule key that sums the rule ids beyond the
// query's top. It cannot be a rule id: parentheses are not in ValidRuleID's
// alphabet.
const StatsOtherRules = "(other)"

// EvidenceStats is GET /v1/evidence/stats: decision counts per interval in
// [since, until), from the checkpointer's hourly rollup.
type EvidenceStats struct {
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	Interval string    `json:"interval"`
	// Top is the number of rule ids each bucket's by_rule lists at most.
	Top     int           `json:"top"`
	Buckets []StatsBucket `json:"buckets"`
}
