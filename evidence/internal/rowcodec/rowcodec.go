// Package rowcodec converts the structured fields of an evidence event to
// and from the JSON columns both stores keep, so PostgreSQL and SQLite store
// byte-identical content and chain hashes recompute from either.
package rowcodec

import (
	"encoding/json"
	"fmt"

	"github.com/portcullis/portcullis/wire"
)

// Columns is the column list of evidence_events in the order every store
// writes and reads it.
var Columns = []string{
	"ts", "id", "receipt_id", "kind", "instance_id", "principal_id", "session_id", "call_id",
	"tool", "decision", "reasons", "policy_revision", "args_sha256", "args", "scope", "trace_id",
	"parent_receipt_id", "error_code", "outcome", "chain_id", "chain_seq", "prev_hash", "hash", "body",
	"rule_ids",
}

// RuleIDsJSON is the JSON text column SQLite keeps rule ids in (PostgreSQL
// keeps a text[]); nil (SQL NULL) when there are none.
func RuleIDsJSON(ids []string) ([]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode rule ids: %w", err)
	}
	return b, nil
}

// DecodeRuleIDs reverses RuleIDsJSON.
func DecodeRuleIDs(b []byte) ([]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var ids []string
	if err := json.Unmarshal(b, &ids); err != nil {
		return nil, fmt.Errorf("decode rule ids: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return ids, nil
}

// JSON holds the encoded JSON columns of one event; nil means SQL NULL.
type JSON struct {
	Reasons, Args, Scope, Outcome []byte
}

// Encode produces the JSON columns of an event's fields.
func Encode(reasons []string, args json.RawMessage, scope *wire.Scope, outcome *wire.Outcome) (JSON, error) {
	var j JSON
	var err error
	if reasons != nil {
		if j.Reasons, err = json.Marshal(reasons); err != nil {
			return JSON{}, fmt.Errorf("encode reasons: %w", err)
		}
	}
	if len(args) > 0 {
		j.Args = args
	}
	if scope != nil {
		if j.Scope, err = json.Marshal(scope); err != nil {
			return JSON{}, fmt.Errorf("encode scope: %w", err)
		}
	}
	if outcome != nil {
		if j.Outcome, err = json.Marshal(outcome); err != nil {
			return JSON{}, fmt.Errorf("encode outcome: %w", err)
		}
	}
	return j, nil
}

// Decode reverses Encode.
func Decode(j JSON) (reasons []string, args json.RawMessage, scope *wire.Scope, outcome *wire.Outcome, err error) {
	if j.Reasons != nil {
		if err = json.Unmarshal(j.Reasons, &reasons); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("decode reasons: %w", err)
		}
	}
	if len(j.Args) > 0 {
		args = json.RawMessage(j.Args)
	}
	if j.Scope != nil && string(j.Scope) != "null" {
		scope = new(wire.Scope)
		if err = json.Unmarshal(j.Scope, scope); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("decode scope: %w", err)
		}
	}
	if j.Outcome != nil && string(j.Outcome) != "null" {
		outcome = new(wire.Outcome)
		if err = json.Unmarshal(j.Outcome, outcome); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("decode outcome: %w", err)
		}
	}
	return reasons, args, scope, outcome, nil
}
