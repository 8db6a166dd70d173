package coderun

import (
	"encoding/json"

	"github.com/portcullis/portcullis/tools/internal/strictjson"
)

// Input bounds, the same ranges as Exec where they overlap, except the
// default timeout: code.run is interactive work.
const (
	DefaultTimeoutS       = 30
	MaxTimeoutS           = 600
	DefaultMaxOutputBytes = 262144
	MinMaxOutputBytes     = 1024
	MaxMaxOutputBytes     = 4194304

	LangTypeScript = "typescript"
	LangJavaScript = "javascript"
)

type input struct {
	args           map[string]any
	code           string
	language       string
	timeoutS       int
	maxOutputBytes int
}

func decodeInput(raw json.RawMessage, maxCode int) (*input, error) {
	obj, err := schema.Decode(raw)
	if err != nil {
		return nil, err
	}
	in := &input{language: LangTypeScript, timeoutS: DefaultTimeoutS, maxOutputBytes: DefaultMaxOutputBytes}
	v, ok := obj.Get("code")
	if !ok {
		return nil, strictjson.Invalid("code", "code is required: the TypeScript or JavaScript program to run")
	}
	if in.code, err = strictjson.String(v, "code", maxCode); err != nil {
		return nil, err
	}
	if in.code == "" {
		return nil, strictjson.Invalid("code", "code is empty")
	}
	if v, ok := obj.Get("language"); ok {
		l, err := strictjson.String(v, "language", 32)
		if err != nil {
			return nil, err
		}
		if l != LangTypeScript && l != LangJavaScript {
			return nil, strictjson.Invalid("language", "language %q is not supported; use typescript or javascript", l)
		}
		in.language = l
	}
	if v, ok := obj.Get("timeout_s"); ok {
		if in.timeoutS, err = strictjson.Int(v, "timeout_s", 1, MaxTimeoutS); err != nil {
			return nil, err
		}
	}
	if v, ok := obj.Get("max_output_bytes"); ok {
		if in.maxOutputBytes, err = strictjson.Int(v, "max_output_bytes", MinMaxOutputBytes, MaxMaxOutputBytes); err != nil {
			return nil, err
		}
	}
	if in.args, err = strictjson.Args(raw); err != nil {
		return nil, err
	}
	return in, nil
}
