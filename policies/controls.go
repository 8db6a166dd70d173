package policies

import (
	"fmt"
	"math"
	"strings"
	"unicode"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/portcullis/portcullis/wire"
)

// The decision's human-oversight controls (contract sections 9 and 10):
// approval and quotas. Both only ever take access away, so a malformed
// one is never dropped (that would run a call the author meant a person
// or a budget to stop): it denies the call, with the reason noted.

// parseApproval reads a decision's approval part; an error denies.
func parseApproval(v any) (*wire.ApprovalRequirement, error) {
	if v == nil {
		return nil, nil
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		return nil, fmt.Errorf("approval is %s, not an object", typeName(v))
	}
	a := &wire.ApprovalRequirement{TTLS: wire.DefaultApprovalTTLS, Approvers: []string{}}
	for k, val := range obj {
		switch k {
		case "required":
			b, ok := val.(bool)
			if !ok {
				return nil, fmt.Errorf("approval.required is %s, not a boolean", typeName(val))
			}
			a.Required = b
		case "reason":
			s, ok := val.(string)
			if !ok || len(s) > wire.MaxApprovalReason {
				return nil, fmt.Errorf("approval.reason is not a string of at most %d bytes", wire.MaxApprovalReason)
			}
			a.Reason = s
		case "approvers":
			list, ok := val.([]any)
			if !ok || len(list) > wire.MaxApprovers {
				return nil, fmt.Errorf("approval.approvers is not an array of at most %d entries", wire.MaxApprovers)
			}
			for i, item := range list {
				s, ok := item.(string)
				if !ok || !validApprover(s) {
					return nil, fmt.Errorf("approval.approvers[%d] is not \"role:<role>\" or \"principal:<id>\"", i)
				}
				a.Approvers = append(a.Approvers, s)
			}
		case "ttl_s":
			n, ok := toInt64(val)
			if !ok || n < 1 || n > wire.MaxApprovalTTLS {
				return nil, fmt.Errorf("approval.ttl_s is not an integer from 1 to %d", wire.MaxApprovalTTLS)
			}
			a.TTLS = int(n)
		default:
			return nil, fmt.Errorf("approval has unknown key %q", k)
		}
	}
	if !a.Required {
		return nil, nil
	}
	return a, nil
}

// validApprover is "role:<role>" or "principal:<id>", printable.
func validApprover(s string) bool {
	kind, name, ok := strings.Cut(s, ":")
	if !ok || name == "" || len(s) > 256 || (kind != "role" && kind != "principal") {
		return false
	}
	return printableString(name)
}

// parseQuotas reads a decision's quotas.
func parseQuotas(v any) ([]wire.Quota, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok || len(list) > wire.MaxQuotas {
		return nil, fmt.Errorf("quotas is not an array of at most %d entries", wire.MaxQuotas)
	}
	out := make([]wire.Quota, 0, len(list))
	for i, item := range list {
		q, err := parseQuota(item)
		if err != nil {
			return nil, fmt.Errorf("quotas[%d]: %v", i, err)
		}
		out = append(out, q)
	}
	return out, nil
}

func parseQuota(v any) (wire.Quota, error) {
	q := wire.Quota{Cost: 1}
	obj, ok := v.(map[string]any)
	if !ok {
		return q, fmt.Errorf("%s, not an object {key, limit, window_s, cost}", typeName(v))
	}
	for k, val := range obj {
		switch k {
		case "key":
			s, ok := val.(string)
			if !ok || s == "" || len(s) > wire.MaxQuotaKeyLen || !printableString(s) {
				return q, fmt.Errorf("key is not a printable string of 1 to %d bytes", wire.MaxQuotaKeyLen)
			}
			q.Key = s
		case "limit", "window_s", "cost":
			n, ok := toInt64(val)
			if !ok || n < 0 || (k != "limit" && n < 1) || (k == "window_s" && n > wire.MaxQuotaWindowS) {
				return q, fmt.Errorf("%s=%v is out of range", k, val)
			}
			switch k {
			case "limit":
				q.Limit = n
			case "window_s":
				q.WindowS = n
			default:
				q.Cost = n
			}
		default:
			return q, fmt.Errorf("unknown key %q", k)
		}
	}
	if q.Key == "" || q.WindowS == 0 {
		return q, fmt.Errorf("key and window_s are required")
	}
	if _, present := obj["limit"]; !present {
		return q, fmt.Errorf("limit is required")
	}
	return q, nil
}

func printableString(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// astQuotas reads well-formed quotas straight from the AST (the hot path
// of a policy that sets quotas on every call); false for anything
// parseQuotas would refuse or that this reader does not take, so the
// caller falls back to parseDecision. Both give the same quotas.
func astQuotas(t *ast.Term) ([]wire.Quota, bool) {
	arr, ok := t.Value.(*ast.Array)
	if !ok || arr.Len() > wire.MaxQuotas {
		return nil, false
	}
	out := make([]wire.Quota, 0, arr.Len())
	for i := range arr.Len() {
		o, ok := arr.Elem(i).Value.(ast.Object)
		if !ok || o.Len() < 3 || o.Len() > 4 {
			return nil, false
		}
		q := wire.Quota{Cost: 1}
		kt := o.Get(keyTerm("key"))
		if kt == nil {
			return nil, false
		}
		key, ok := kt.Value.(ast.String)
		if !ok || key == "" || len(key) > wire.MaxQuotaKeyLen || !printableString(string(key)) {
			return nil, false
		}
		q.Key = string(key)
		n := 1
		for _, f := range []struct {
			name string
			dst  *int64
			min  int64
			max  int64
			opt  bool
		}{
			{"limit", &q.Limit, 0, math.MaxInt64, false},
			{"window_s", &q.WindowS, 1, wire.MaxQuotaWindowS, false},
			{"cost", &q.Cost, 1, math.MaxInt64, true},
		} {
			v := o.Get(keyTerm(f.name))
			if v == nil {
				if f.opt {
					continue
				}
				return nil, false
			}
			num, ok := v.Value.(ast.Number)
			if !ok {
				return nil, false
			}
			x, ok := num.Int64()
			if !ok || x < f.min || x > f.max {
				return nil, false
			}
			*f.dst = x
			n++
		}
		if n != o.Len() {
			return nil, false // an unknown key
		}
		out = append(out, q)
	}
	return out, true
}
