package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/portcullis/portcullis/wire"
)

// deny is a refusal with one reason.
func deny(reason string) wire.Decision {
	return wire.Decision{
		Reasons:  []string{reason},
		FSGrants: []wire.FSGrant{},
		Network:  wire.Network{Posture: wire.PostureOff, Allow: []string{}},
		Env:      wire.EnvPolicy{Pass: []string{}, Set: map[string]string{}},
	}
}

// parseDecision reads the policy's result with safe defaults: a missing or
// ill-typed field takes its narrowest value and is noted in the reasons, so
// a policy mistake can only ever take access away.
func parseDecision(v any) wire.Decision {
	obj, ok := v.(map[string]any)
	if !ok {
		return deny(fmt.Sprintf("policy decision is %s, not an object", typeName(v)))
	}
	d := deny("")
	d.Reasons = d.Reasons[:0]
	var notes []string

	switch a := obj["allow"].(type) {
	case bool:
		d.Allow = a
	case nil:
	default:
		notes = append(notes, fmt.Sprintf("policy allow is %s, not a boolean: denied", typeName(a)))
	}

	switch rs := obj["reasons"].(type) {
	case nil:
	case []any:
		for _, r := range rs {
			if s, ok := r.(string); ok {
				d.Reasons = append(d.Reasons, s)
			} else {
				notes = append(notes, fmt.Sprintf("policy reason of type %s dropped", typeName(r)))
			}
		}
	default:
		notes = append(notes, fmt.Sprintf("policy reasons is %s, not an array: dropped", typeName(rs)))
	}

	d.FSGrants, notes = parseFSGrants(obj["fs_grants"], notes)
	var denyOK bool
	d.FSDeny, denyOK, notes = parseFSDeny(obj["fs_deny"], notes)
	if !denyOK {
		// Dropping a deny entry would widen access: fail closed instead.
		d.Allow = false
	}
	var idsOK bool
	d.RuleIDs, idsOK, notes = parseRuleIDs(obj["rule_ids"], notes)
	if !idsOK {
		// A decision whose rule ids cannot be recorded cannot be audited:
		// fail closed, as for fs_deny.
		d.Allow = false
	}
	if v, present := obj["exec"]; present && v != nil {
		plan, err := parseExec(v)
		if err != nil {
			// Dropping a path argument or a forced flag would widen
			// access: fail closed, as for fs_deny.
			d.Allow = false
			notes = append(notes, fmt.Sprintf("policy exec is malformed (%v): call denied", err))
		} else {
			d.Exec = plan
		}
	}
	if a, err := parseApproval(obj["approval"]); err != nil {
		d.Allow = false
		notes = append(notes, fmt.Sprintf("policy approval is malformed (%v): call denied", err))
	} else {
		d.Approval = a
	}
	if q, err := parseQuotas(obj["quotas"]); err != nil {
		d.Allow = false
		notes = append(notes, fmt.Sprintf("policy quotas is malformed (%v): call denied", err))
	} else {
		d.Quotas = q
	}
	d.Network, notes = parseNetwork(obj["network"], notes)
	d.Env, notes = parseEnv(obj["env"], notes)
	d.Limits, notes = parseLimits(obj["limits"], notes)

	if !d.Allow && len(d.Reasons) == 0 && len(notes) == 0 {
		d.Reasons = append(d.Reasons, "policy did not allow the call")
	}
	d.Reasons = append(d.Reasons, notes...)
	return d
}

// parseFSDeny reads the paths the sandbox must hide even inside the
// grants. Unlike a grant, a malformed entry cannot simply be dropped (that
// would show what the author meant to hide), so ok is false and the caller
// denies the call.
func parseFSDeny(v any, notes []string) (paths []string, ok bool, _ []string) {
	if v == nil {
		return nil, true, notes
	}
	list, isList := v.([]any)
	if !isList {
		return nil, false, append(notes, fmt.Sprintf("policy fs_deny is %s, not an array of absolute paths: call denied", typeName(v)))
	}
	for i, item := range list {
		p, isStr := item.(string)
		if !isStr || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || path.Clean(p) != p {
			return nil, false, append(notes, fmt.Sprintf("policy fs_deny[%d] is not a clean absolute path: call denied", i))
		}
		paths = append(paths, p)
	}
	return paths, true, notes
}

// parseExec reads the Exec plan of a decision (wire.ExecPlan). Anything
// it does not understand is an error, never dropped: a misspelled key
// could otherwise silently lose a path check or a forced flag.
func parseExec(v any) (*wire.ExecPlan, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("exec is %s, not an object", typeName(v))
	}
	p := &wire.ExecPlan{}
	for k, val := range obj {
		switch k {
		case "insert":
			list, ok := val.([]any)
			if !ok {
				return nil, fmt.Errorf("insert is %s, not an array", typeName(val))
			}
			n := 0
			for i, item := range list {
				ins, ok := item.(map[string]any)
				if !ok || len(ins) != 2 {
					return nil, fmt.Errorf("insert[%d] is not an object {at, args}", i)
				}
				at, ok := toInt64(ins["at"])
				if !ok || at < 1 || at > math.MaxInt32 {
					return nil, fmt.Errorf("insert[%d].at is not a positive integer", i)
				}
				args, ok := ins["args"].([]any)
				if !ok {
					return nil, fmt.Errorf("insert[%d].args is not an array", i)
				}
				a := wire.ArgInsert{At: int(at), Args: make([]string, 0, len(args))}
				for _, x := range args {
					s, ok := x.(string)
					if !ok || s == "" || strings.ContainsRune(s, 0) {
						return nil, fmt.Errorf("insert[%d].args holds something other than non-empty strings", i)
					}
					a.Args = append(a.Args, s)
				}
				if n += len(a.Args); n > wire.MaxInsertArgs {
					return nil, fmt.Errorf("insert has more than %d arguments", wire.MaxInsertArgs)
				}
				p.Insert = append(p.Insert, a)
			}
		case "path_args":
			list, ok := val.([]any)
			if !ok || len(list) > wire.MaxPathArgs {
				return nil, fmt.Errorf("path_args is not an array of at most %d entries", wire.MaxPathArgs)
			}
			for i, item := range list {
				pa, ok := item.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("path_args[%d] is not an object {index, value?}", i)
				}
				var arg wire.PathArg
				for pk, pv := range pa {
					switch pk {
					case "index":
						n, ok := toInt64(pv)
						if !ok || n < 1 || n > math.MaxInt32 {
							return nil, fmt.Errorf("path_args[%d].index is not a positive integer", i)
						}
						arg.Index = int(n)
					case "value":
						b, ok := pv.(bool)
						if !ok {
							return nil, fmt.Errorf("path_args[%d].value is not a boolean", i)
						}
						arg.Value = b
					default:
						return nil, fmt.Errorf("path_args[%d] has unknown key %q", i, pk)
					}
				}
				if arg.Index == 0 {
					return nil, fmt.Errorf("path_args[%d] has no index", i)
				}
				p.PathArgs = append(p.PathArgs, arg)
			}
		case "exec_restrict":
			b, ok := val.(bool)
			if !ok {
				return nil, fmt.Errorf("exec_restrict is %s, not a boolean", typeName(val))
			}
			p.ExecRestrict = b
		case "exec_allow":
			list, ok := val.([]any)
			if !ok || len(list) > wire.MaxExecAllow {
				return nil, fmt.Errorf("exec_allow is not an array of at most %d paths", wire.MaxExecAllow)
			}
			for i, item := range list {
				s, ok := item.(string)
				if !ok || s == "" || strings.ContainsRune(s, 0) {
					return nil, fmt.Errorf("exec_allow[%d] is not a path", i)
				}
				p.ExecAllow = append(p.ExecAllow, s)
			}
		default:
			return nil, fmt.Errorf("unknown key %q", k)
		}
	}
	if len(p.ExecAllow) > 0 && !p.ExecRestrict {
		return nil, errors.New("exec_allow without exec_restrict")
	}
	return p, nil
}

// parseRuleIDs reads the rule ids that name what produced the decision.
// They are evidence: a malformed list is not trimmed to what parses (the
// receipt would then name the wrong rules) but denies the call, with the
// ids dropped and the reason noted.
func parseRuleIDs(v any, notes []string) (ids []string, ok bool, _ []string) {
	if v == nil {
		return nil, true, notes
	}
	list, isList := v.([]any)
	if !isList {
		return nil, false, append(notes, fmt.Sprintf("policy rule_ids is %s, not an array of rule ids: call denied", typeName(v)))
	}
	if len(list) > wire.MaxRuleIDs {
		return nil, false, append(notes, fmt.Sprintf("policy rule_ids has %d entries, more than %d: call denied", len(list), wire.MaxRuleIDs))
	}
	for i, item := range list {
		s, isStr := item.(string)
		if !isStr || !wire.ValidRuleID(s) {
			return nil, false, append(notes, fmt.Sprintf("policy rule_ids[%d] is not a rule id (1-%d of A-Z a-z 0-9 _ . : / -): call denied", i, wire.MaxRuleIDLen))
		}
		ids = append(ids, s)
	}
	return ids, true, notes
}

func parseFSGrants(v any, notes []string) ([]wire.FSGrant, []string) {
	out := []wire.FSGrant{}
	if v == nil {
		return out, notes
	}
	list, ok := v.([]any)
	if !ok {
		return out, append(notes, fmt.Sprintf("policy fs_grants is %s, not an array: no fs grants", typeName(v)))
	}
	for i, item := range list {
		g, err := parseFSGrant(item)
		if err != nil {
			notes = append(notes, fmt.Sprintf("policy fs_grants[%d] dropped: %v", i, err))
			continue
		}
		out = append(out, g)
	}
	return out, notes
}

// checkGrantPath is nil when v is an absolute, clean path.
func checkGrantPath(v any) error {
	p, ok := v.(string)
	if !ok {
		return fmt.Errorf("path is %s, not a string", typeName(v))
	}
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q is not absolute", p)
	}
	if path.Clean(p) != p {
		return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
	}
	return nil
}

func parseFSGrant(v any) (wire.FSGrant, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return wire.FSGrant{}, fmt.Errorf("%s, not an object", typeName(v))
	}
	if obj["alias"] == wire.AliasState {
		// The gateway picks @state's directory (gateway/statedir); a
		// policy that names one is refused rather than half obeyed.
		if p, present := obj["path"]; present && p != "" {
			return wire.FSGrant{}, fmt.Errorf("alias %s takes no path (the gateway binds it per session), got %v", wire.AliasState, p)
		}
	} else if err := checkGrantPath(obj["path"]); err != nil {
		return wire.FSGrant{}, err
	}
	p, _ := obj["path"].(string)
	mode, ok := obj["mode"].(string)
	if !ok || (mode != wire.ModeRead && mode != wire.ModeReadWrite) {
		return wire.FSGrant{}, fmt.Errorf("mode %v is not %q or %q", obj["mode"], wire.ModeRead, wire.ModeReadWrite)
	}
	g := wire.FSGrant{Path: p, Mode: mode}
	switch a := obj["alias"].(type) {
	case nil:
	case string:
		if a != "" && (!strings.HasPrefix(a, "@") || len(a) == 1 || strings.ContainsAny(a[1:], "/@") || strings.ContainsRune(a, 0)) {
			return wire.FSGrant{}, fmt.Errorf("alias %q is not @name", a)
		}
		g.Alias = a
	default:
		return wire.FSGrant{}, fmt.Errorf("alias is %s, not a string", typeName(a))
	}
	// allow_autorun lifts the file tools' autorun guard for this grant;
	// only an explicit true does.
	switch a := obj["allow_autorun"].(type) {
	case nil:
	case bool:
		g.AllowAutorun = a
	default:
		return wire.FSGrant{}, fmt.Errorf("allow_autorun is %s, not a boolean", typeName(a))
	}
	return g, nil
}

func parseNetwork(v any, notes []string) (wire.Network, []string) {
	n := wire.Network{Posture: wire.PostureOff, Allow: []string{}}
	if v == nil {
		return n, notes
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return n, append(notes, fmt.Sprintf("policy network is %s, not an object: posture off", typeName(v)))
	}
	switch p := obj["posture"].(type) {
	case nil:
	case string:
		switch p {
		case wire.PostureOff, wire.PostureAllowlist, wire.PostureFull:
			n.Posture = p
		default:
			notes = append(notes, fmt.Sprintf("policy network posture %q unknown: posture off", p))
		}
	default:
		notes = append(notes, fmt.Sprintf("policy network posture is %s, not a string: posture off", typeName(p)))
	}
	switch list := obj["allow"].(type) {
	case nil:
	case []any:
		for _, item := range list {
			if s, ok := item.(string); ok && s != "" {
				n.Allow = append(n.Allow, s)
			} else {
				notes = append(notes, fmt.Sprintf("policy network allow entry %v dropped", item))
			}
		}
	default:
		notes = append(notes, fmt.Sprintf("policy network allow is %s, not an array: dropped", typeName(list)))
	}
	if n.Posture == wire.PostureOff {
		n.Allow = []string{}
	}
	return n, notes
}

func parseEnv(v any, notes []string) (wire.EnvPolicy, []string) {
	e := wire.EnvPolicy{Pass: []string{}, Set: map[string]string{}}
	if v == nil {
		return e, notes
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return e, append(notes, fmt.Sprintf("policy env is %s, not an object: no env", typeName(v)))
	}
	switch list := obj["pass"].(type) {
	case nil:
	case []any:
		for _, item := range list {
			if s, ok := item.(string); ok && validEnvName(s) {
				e.Pass = append(e.Pass, s)
			} else {
				notes = append(notes, fmt.Sprintf("policy env pass entry %v dropped", item))
			}
		}
	default:
		notes = append(notes, fmt.Sprintf("policy env pass is %s, not an array: dropped", typeName(list)))
	}
	switch set := obj["set"].(type) {
	case nil:
	case map[string]any:
		for k, val := range set {
			s, ok := val.(string)
			if !ok || !validEnvName(k) || strings.ContainsRune(s, 0) {
				notes = append(notes, fmt.Sprintf("policy env set %q dropped", k))
				continue
			}
			e.Set[k] = s
		}
	default:
		notes = append(notes, fmt.Sprintf("policy env set is %s, not an object: dropped", typeName(set)))
	}
	return e, notes
}

// validEnvName accepts names a child process can receive unambiguously.
func validEnvName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "=\x00")
}

// limitFields are the decision's limits as both decoders read them (the
// JSON one, parseLimits, and the AST fast path, astLimits): each name, the
// largest value it takes, and where it goes.
var limitFields = [...]struct {
	name string
	max  int64
	set  func(*wire.Limits, int64)
}{
	{"timeout_s", math.MaxInt32, func(l *wire.Limits, n int64) { l.TimeoutS = int(n) }},
	{"cpu_seconds", math.MaxInt32, func(l *wire.Limits, n int64) { l.CPUSeconds = int(n) }},
	{"memory_bytes", math.MaxInt64, func(l *wire.Limits, n int64) { l.MemoryBytes = n }},
	{"fsize_bytes", math.MaxInt64, func(l *wire.Limits, n int64) { l.FsizeBytes = n }},
	{"nofile", math.MaxInt32, func(l *wire.Limits, n int64) { l.Nofile = int(n) }},
	{"max_output_bytes", math.MaxInt32, func(l *wire.Limits, n int64) { l.MaxOutputBytes = int(n) }},
}

func parseLimits(v any, notes []string) (wire.Limits, []string) {
	var l wire.Limits
	if v == nil {
		return l, notes
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return l, append(notes, fmt.Sprintf("policy limits is %s, not an object: gateway defaults", typeName(v)))
	}
	for _, f := range limitFields {
		raw, present := obj[f.name]
		if !present || raw == nil {
			continue
		}
		n, ok := toInt64(raw)
		if !ok || n < 0 || n > f.max {
			notes = append(notes, fmt.Sprintf("policy limit %s=%v dropped: want a non-negative integer", f.name, raw))
			continue
		}
		f.set(&l, n)
	}
	return l, notes
}

// toInt64 accepts integral numbers in any of the shapes OPA results take.
func toInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err == nil {
			return i, true
		}
		f, err := n.Float64()
		if err != nil {
			return 0, false
		}
		return floatToInt(f)
	case float64:
		return floatToInt(n)
	case int:
		return int64(n), true
	case int64:
		return n, true
	default:
		return 0, false
	}
}

func floatToInt(f float64) (int64, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) || f > math.MaxInt64 || f < math.MinInt64 {
		return 0, false
	}
	return int64(f), true
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number, float64, int, int64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// decisionFromAST reads a well-formed decision straight from the policy's
// AST result, without building the map parseDecision reads. It returns false
// for anything parseDecision would note, drop or default (including null
// fields), so that the caller falls back to parseDecision: both give the
// same Decision for every value this accepts.
func decisionFromAST(v ast.Value) (wire.Decision, bool) {
	obj, ok := v.(ast.Object)
	if !ok {
		return wire.Decision{}, false
	}
	d := wire.Decision{
		Reasons:  []string{},
		FSGrants: []wire.FSGrant{},
		Network:  wire.Network{Posture: wire.PostureOff, Allow: []string{}},
		Env:      wire.EnvPolicy{Pass: []string{}, Set: map[string]string{}},
	}
	if t := obj.Get(keyTerm("allow")); t != nil {
		b, ok := t.Value.(ast.Boolean)
		if !ok {
			return d, false
		}
		d.Allow = bool(b)
	}
	if t := obj.Get(keyTerm("reasons")); t != nil {
		rs, ok := appendASTStrings(d.Reasons, t, nil)
		d.Reasons = rs
		if !ok {
			return d, false
		}
	}
	if !d.Allow && len(d.Reasons) == 0 {
		return d, false
	}
	if obj.Get(keyTerm("fs_deny")) != nil || obj.Get(keyTerm("approval")) != nil {
		return d, false // rare: the general parser validates them
	}
	if t := obj.Get(keyTerm("quotas")); t != nil {
		qs, ok := astQuotas(t)
		if !ok {
			return d, false // the general parser reads it, or denies with a note
		}
		d.Quotas = qs
	}
	if t := obj.Get(keyTerm("rule_ids")); t != nil {
		ids, ok := t.Value.(*ast.Array)
		if !ok || ids.Len() > wire.MaxRuleIDs {
			return d, false
		}
		if n := ids.Len(); n > 0 {
			d.RuleIDs = make([]string, 0, n)
		}
		if d.RuleIDs, ok = appendASTStrings(d.RuleIDs, t, wire.ValidRuleID); !ok {
			return d, false
		}
	}
	if t := obj.Get(keyTerm("exec")); t != nil {
		plan, ok := astExec(t)
		if !ok {
			return d, false // the general parser reads it, or denies with a note
		}
		d.Exec = plan
	}
	ok = astFSGrants(obj.Get(keyTerm("fs_grants")), &d) &&
		astNetwork(obj.Get(keyTerm("network")), &d) &&
		astEnv(obj.Get(keyTerm("env")), &d) &&
		astLimits(obj.Get(keyTerm("limits")), &d)
	return d, ok
}

// astExec reads a well-formed Exec plan straight from the AST; false for
// anything parseExec would refuse (or that this reader does not take).
func astExec(t *ast.Term) (*wire.ExecPlan, bool) {
	o, ok := t.Value.(ast.Object)
	if !ok {
		return nil, false
	}
	p := &wire.ExecPlan{}
	nins := 0
	err := o.Iter(func(k, v *ast.Term) error {
		key, ok := k.Value.(ast.String)
		if !ok {
			return errNotClean
		}
		switch key {
		case "insert":
			list, ok := v.Value.(*ast.Array)
			if !ok {
				return errNotClean
			}
			for i := range list.Len() {
				ins, ok := list.Elem(i).Value.(ast.Object)
				if !ok || ins.Len() != 2 {
					return errNotClean
				}
				at, ok := astInt(ins.Get(keyTerm("at")))
				args, ok2 := astStrings(ins.Get(keyTerm("args")))
				if !ok || !ok2 || at < 1 || at > math.MaxInt32 {
					return errNotClean
				}
				if nins += len(args); nins > wire.MaxInsertArgs {
					return errNotClean
				}
				p.Insert = append(p.Insert, wire.ArgInsert{At: int(at), Args: args})
			}
		case "path_args":
			list, ok := v.Value.(*ast.Array)
			if !ok || list.Len() > wire.MaxPathArgs {
				return errNotClean
			}
			for i := range list.Len() {
				pa, ok := list.Elem(i).Value.(ast.Object)
				if !ok || pa.Len() < 1 || pa.Len() > 2 {
					return errNotClean
				}
				idx, ok := astInt(pa.Get(keyTerm("index")))
				if !ok || idx < 1 || idx > math.MaxInt32 {
					return errNotClean
				}
				arg := wire.PathArg{Index: int(idx)}
				if pa.Len() == 2 {
					b, ok := pa.Get(keyTerm("value")).Value.(ast.Boolean)
					if !ok {
						return errNotClean
					}
					arg.Value = bool(b)
				}
				p.PathArgs = append(p.PathArgs, arg)
			}
		case "exec_restrict":
			b, ok := v.Value.(ast.Boolean)
			if !ok {
				return errNotClean
			}
			p.ExecRestrict = bool(b)
		case "exec_allow":
			list, ok := astStrings(v)
			if !ok || len(list) > wire.MaxExecAllow {
				return errNotClean
			}
			if len(list) > 0 {
				p.ExecAllow = list
			}
		default:
			return errNotClean
		}
		return nil
	})
	if err != nil || (len(p.ExecAllow) > 0 && !p.ExecRestrict) {
		return nil, false
	}
	return p, true
}

// astInt is an integer term's value.
func astInt(t *ast.Term) (int64, bool) {
	if t == nil {
		return 0, false
	}
	n, ok := t.Value.(ast.Number)
	if !ok {
		return 0, false
	}
	return n.Int64()
}

// astStrings is an array term of non-empty strings without NUL.
func astStrings(t *ast.Term) ([]string, bool) {
	if t == nil {
		return nil, false
	}
	list, ok := t.Value.(*ast.Array)
	if !ok {
		return nil, false
	}
	out, ok := appendASTStrings(make([]string, 0, list.Len()), t, func(s string) bool {
		return s != "" && !strings.ContainsRune(s, 0)
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// appendASTStrings appends the elements of the array term t to dst, each
// a string that valid accepts (nil: any string); false, with what was
// appended so far, when t is not such an array.
func appendASTStrings(dst []string, t *ast.Term, valid func(string) bool) ([]string, bool) {
	list, ok := t.Value.(*ast.Array)
	if !ok {
		return dst, false
	}
	for i := range list.Len() {
		s, ok := list.Elem(i).Value.(ast.String)
		if !ok || (valid != nil && !valid(string(s))) {
			return dst, false
		}
		dst = append(dst, string(s))
	}
	return dst, true
}

func nonEmpty(s string) bool { return s != "" }

func astString(o ast.Object, key string) (string, bool, bool) {
	t := o.Get(keyTerm(key))
	if t == nil {
		return "", false, true
	}
	s, ok := t.Value.(ast.String)
	return string(s), true, ok
}

func astFSGrants(t *ast.Term, d *wire.Decision) bool {
	if t == nil {
		return true
	}
	list, ok := t.Value.(*ast.Array)
	if !ok {
		return false
	}
	for i := range list.Len() {
		o, ok := list.Elem(i).Value.(ast.Object)
		if !ok {
			return false
		}
		alias, _, ok := astString(o, "alias")
		if !ok || (alias != "" && (!strings.HasPrefix(alias, "@") || len(alias) == 1 || strings.ContainsAny(alias[1:], "/@") || strings.ContainsRune(alias, 0))) {
			return false
		}
		p, present, ok := astString(o, "path")
		if alias == wire.AliasState {
			if !ok || p != "" {
				return false // the general parser says why
			}
		} else if !present || !ok || !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || path.Clean(p) != p {
			return false
		}
		mode, present, ok := astString(o, "mode")
		if !present || !ok || (mode != wire.ModeRead && mode != wire.ModeReadWrite) {
			return false
		}
		autorun := false
		if t := o.Get(keyTerm("allow_autorun")); t != nil {
			b, ok := t.Value.(ast.Boolean)
			if !ok {
				return false // the general parser says why
			}
			autorun = bool(b)
		}
		d.FSGrants = append(d.FSGrants, wire.FSGrant{Path: p, Mode: mode, Alias: alias, AllowAutorun: autorun})
	}
	return true
}

func astNetwork(t *ast.Term, d *wire.Decision) bool {
	if t == nil {
		return true
	}
	o, ok := t.Value.(ast.Object)
	if !ok {
		return false
	}
	posture, present, ok := astString(o, "posture")
	if !ok {
		return false
	}
	if present {
		switch posture {
		case wire.PostureOff, wire.PostureAllowlist, wire.PostureFull:
			d.Network.Posture = posture
		default:
			return false
		}
	}
	if a := o.Get(keyTerm("allow")); a != nil {
		if d.Network.Allow, ok = appendASTStrings(d.Network.Allow, a, nonEmpty); !ok {
			return false
		}
	}
	if d.Network.Posture == wire.PostureOff {
		d.Network.Allow = []string{}
	}
	return true
}

func astEnv(t *ast.Term, d *wire.Decision) bool {
	if t == nil {
		return true
	}
	o, ok := t.Value.(ast.Object)
	if !ok {
		return false
	}
	if p := o.Get(keyTerm("pass")); p != nil {
		if d.Env.Pass, ok = appendASTStrings(d.Env.Pass, p, validEnvName); !ok {
			return false
		}
	}
	if st := o.Get(keyTerm("set")); st != nil {
		set, ok := st.Value.(ast.Object)
		if !ok {
			return false
		}
		err := set.Iter(func(k, v *ast.Term) error {
			ks, ok1 := k.Value.(ast.String)
			vs, ok2 := v.Value.(ast.String)
			if !ok1 || !ok2 || !validEnvName(string(ks)) || strings.ContainsRune(string(vs), 0) {
				return errNotClean
			}
			d.Env.Set[string(ks)] = string(vs)
			return nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

var errNotClean = errors.New("not a clean decision")

func astLimits(t *ast.Term, d *wire.Decision) bool {
	if t == nil {
		return true
	}
	o, ok := t.Value.(ast.Object)
	if !ok {
		return false
	}
	for _, f := range limitFields {
		raw := o.Get(keyTerm(f.name))
		if raw == nil {
			continue
		}
		num, ok := raw.Value.(ast.Number)
		if !ok {
			return false
		}
		n, ok := num.Int64()
		if !ok || n < 0 || n > f.max {
			return false
		}
		f.set(&d.Limits, n)
	}
	return true
}
