package exectool

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

// Input bounds. The contract fixes the timeout and output ranges; the size
// bounds keep one call's argv and env within what execve accepts.
const (
	DefaultTimeoutS       = 60
	MinTimeoutS           = 1
	MaxTimeoutS           = 600
	DefaultMaxOutputBytes = 262144
	MinMaxOutputBytes     = 1024
	MaxMaxOutputBytes     = 4194304

	MaxArgs      = 4096      // argv entries
	MaxArgBytes  = 128 << 10 // one argv entry or env value (execve's MAX_ARG_STRLEN)
	MaxArgvBytes = 1 << 20   // argv and caller env together
	MaxEnvVars   = 1024      // caller env entries
)

// input is a validated Exec request.
type input struct {
	args           map[string]any // the caller's input as decoded (policy input.args)
	argv           []string       // as given
	argv0          string         // where argv[0] leads (leadsTo); a real path once Enforce passed
	cwd            string         // where cwd leads, "" when not given
	cwdGiven       string         // cwd as the caller sent it
	env            map[string]string
	timeoutS       int
	maxOutputBytes int
}

// decodeInput applies the contract's rules. Optional fields given as JSON
// null count as absent (OpenAI strict mode sends them that way). Every error
// is a *wire.Error with code invalid_input or too_large naming the field.
func decodeInput(raw json.RawMessage, res *resolver) (*input, error) {
	obj, err := schema.Decode(raw)
	if err != nil {
		return nil, err
	}
	in := &input{timeoutS: DefaultTimeoutS, maxOutputBytes: DefaultMaxOutputBytes}

	if in.argv, err = decodeArgv(obj.Values["argv"]); err != nil {
		return nil, err
	}
	total := 0
	for _, a := range in.argv {
		total += len(a) + 1
	}
	if v, ok := obj.Get("env"); ok {
		env, size, err := decodeEnv(v)
		if err != nil {
			return nil, err
		}
		in.env = env
		total += size
	}
	if total > MaxArgvBytes {
		return nil, strictjson.TooLarge("argv", "argv and env together are %d bytes; at most %d are accepted", total, MaxArgvBytes)
	}
	if v, ok := obj.Get("timeout_s"); ok {
		if in.timeoutS, err = strictjson.Int(v, "timeout_s", MinTimeoutS, MaxTimeoutS); err != nil {
			return nil, err
		}
	}
	if v, ok := obj.Get("max_output_bytes"); ok {
		if in.maxOutputBytes, err = strictjson.Int(v, "max_output_bytes", MinMaxOutputBytes, MaxMaxOutputBytes); err != nil {
			return nil, err
		}
	}

	if in.argv0, err = resolveExecutable(in.argv[0], res); err != nil {
		return nil, err
	}
	if v, ok := obj.Get("cwd"); ok {
		var cwd string
		if err := json.Unmarshal(v, &cwd); err != nil || !utf8.Valid(v) {
			return nil, strictjson.Invalid("cwd", "cwd must be a string: an absolute directory path")
		}
		in.cwdGiven = cwd
		if in.cwd, err = resolveDir(cwd, res); err != nil {
			return nil, err
		}
	}

	// args is what policy sees as input.args: the input decoded the way
	// encoding/json decodes into any (numbers are float64, arrays []any).
	if in.args, err = strictjson.Args(raw); err != nil {
		return nil, err
	}
	return in, nil
}

func decodeArgv(v json.RawMessage) ([]string, error) {
	const want = "argv must be a non-empty array of non-empty strings, argv[0] an absolute path such as /usr/bin/git"
	if v == nil || strictjson.IsNull(v) {
		return nil, strictjson.Invalid("argv", "argv is required: %s", want)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, strictjson.Invalid("argv", "%s", want)
	}
	if len(elems) == 0 {
		return nil, strictjson.Invalid("argv", "argv is empty: %s", want)
	}
	if len(elems) > MaxArgs {
		return nil, strictjson.TooLarge("argv", "argv has %d entries; at most %d are accepted", len(elems), MaxArgs)
	}
	argv := make([]string, len(elems))
	for i, e := range elems {
		field := fmt.Sprintf("argv[%d]", i)
		var s string
		if err := json.Unmarshal(e, &s); err != nil || strictjson.IsNull(e) {
			return nil, strictjson.Invalid(field, "%s must be a string; %s", field, want)
		}
		if err := strictjson.CheckString(field, s, e, MaxArgBytes); err != nil {
			return nil, err
		}
		if s == "" {
			return nil, strictjson.Invalid(field, "%s is empty; %s", field, want)
		}
		argv[i] = s
	}
	return argv, nil
}

func decodeEnv(v json.RawMessage) (map[string]string, int, error) {
	obj, err := strictjson.Decode(v, "env")
	if err != nil {
		return nil, 0, err
	}
	if len(obj.Keys) > MaxEnvVars {
		return nil, 0, strictjson.TooLarge("env", "env has %d entries; at most %d are accepted", len(obj.Keys), MaxEnvVars)
	}
	env := make(map[string]string, len(obj.Keys))
	size := 0
	for _, k := range obj.Keys {
		field := "env." + k
		if err := checkEnvName(k); err != nil {
			return nil, 0, strictjson.Invalid(field, "env name %q %v", k, err)
		}
		var s string
		if err := json.Unmarshal(obj.Values[k], &s); err != nil || strictjson.IsNull(obj.Values[k]) {
			return nil, 0, strictjson.Invalid(field, "env value of %q must be a string", k)
		}
		if err := strictjson.CheckString(field, s, obj.Values[k], MaxArgBytes); err != nil {
			return nil, 0, err
		}
		env[k] = s
		size += len(k) + 1 + len(s) + 1
	}
	return env, size, nil
}

// checkEnvName applies the naming rules for the caller's env. LD_* names go
// beyond the contract's "_" rule: the dynamic loader would otherwise let a
// caller load code of its choosing into whatever program the policy allowed
// (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH).
func checkEnvName(k string) error {
	switch {
	case k == "":
		return errors.New("is empty; names must be non-empty")
	case strings.ContainsAny(k, "=\x00"):
		return errors.New("contains '=' or NUL; names must not")
	case strings.HasPrefix(k, "_"):
		return errors.New("starts with '_'; such names are reserved")
	case strings.HasPrefix(k, "LD_"):
		return errors.New("is a dynamic loader variable (LD_*); those are not accepted")
	case !utf8.ValidString(k) || len(k) > 1024:
		return errors.New("must be valid UTF-8 of at most 1024 bytes")
	}
	return nil
}

// resolveExecutable checks argv[0]'s form and returns where it leads
// (leadsTo, remembered by res: a nil res walks). Whether it exists and is a program is checked by Enforce,
// after the grants: see leadsTo for why.
func resolveExecutable(p string, res *resolver) (string, error) {
	const want = "argv[0] must be the absolute path of an existing executable file, e.g. /usr/bin/git (no PATH lookup)"
	if !filepath.IsAbs(p) {
		return "", strictjson.Invalid("argv[0]", "argv[0] %q is not absolute; %s", p, want)
	}
	return res.leadsTo(p), nil
}

// resolveDir checks cwd's form and returns where it leads; Enforce checks
// that it is a directory, after the grants.
func resolveDir(p string, res *resolver) (string, error) {
	const want = "cwd must be the absolute path of an existing directory inside the granted paths"
	if !filepath.IsAbs(p) {
		return "", strictjson.Invalid("cwd", "cwd %q is not absolute; %s", p, want)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", strictjson.Invalid("cwd", "cwd contains a NUL byte; %s", want)
	}
	return res.leadsTo(p), nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
