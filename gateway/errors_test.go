package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/evidence"
	"github.com/portcullis/portcullis/wire"
)

// TestCodeTable holds the one table from contract code to answer against
// every code wire declares: each has a row, the HTTP status the contract
// gives it, and the MCP disposition (a JSON-RPC error, or a tool result
// with isError the model can act on).
func TestCodeTable(t *testing.T) {
	t.Parallel()
	want := map[wire.Code]struct {
		status int
		rpc    int
	}{
		wire.CodeUnauthenticated:     {401, 0},
		wire.CodeForbidden:           {403, 0},
		wire.CodeInvalidInput:        {400, 0},
		wire.CodeUnknownTool:         {404, rpcInvalidParams},
		wire.CodePermissionDenied:    {403, 0},
		wire.CodeFSDenied:            {403, 0},
		wire.CodeNetworkDenied:       {403, 0},
		wire.CodeSandboxViolation:    {403, 0},
		wire.CodeNotFound:            {404, 0},
		wire.CodePreconditionFailed:  {412, 0},
		wire.CodeInvalidFrontmatter:  {422, 0},
		wire.CodeReadLimit:           {413, 0},
		wire.CodeWriteLimit:          {413, 0},
		wire.CodeTooLarge:            {413, 0},
		wire.CodeTimeout:             {504, 0},
		wire.CodeToolError:           {200, 0},
		wire.CodeToolChanged:         {409, 0},
		wire.CodeApprovalRequired:    {202, 0},
		wire.CodeApprovalRejected:    {403, 0},
		wire.CodeApprovalExpired:     {410, 0},
		wire.CodeRateLimited:         {429, 0},
		wire.CodeEvidenceUnavailable: {503, 0},
		wire.CodeSandboxUnavailable:  {503, 0},
		wire.CodeBackendUnavailable:  {503, 0},
		wire.CodeInternal:            {500, 0},
	}
	declared := declaredCodes(t)
	if len(declared) != len(wire.Codes) {
		t.Errorf("wire declares %d codes, wire.Codes lists %d: keep them equal", len(declared), len(wire.Codes))
	}
	for _, code := range declared {
		t.Run(string(code), func(t *testing.T) {
			t.Parallel()
			w, ok := want[code]
			if !ok {
				t.Fatalf("no expected answer for %s in this test: add one", code)
			}
			if _, ok := codeTable[code]; !ok {
				t.Fatalf("codeTable has no row for %s", code)
			}
			if got := statusOf(code); got != w.status {
				t.Errorf("statusOf(%s) = %d, want %d", code, got, w.status)
			}
			if got := mcpRPCCode(code); got != w.rpc {
				t.Errorf("mcpRPCCode(%s) = %d, want %d", code, got, w.rpc)
			}
		})
	}
	if got := statusOf("no_such_code"); got != http.StatusInternalServerError {
		t.Errorf("an unknown code answers %d, want 500", got)
	}
}

// declaredCodes reads wire's source for every constant of type Code, so a
// code added there without a row here fails the test above.
func declaredCodes(t *testing.T) []wire.Code {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../wire/errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.Code
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit := v.(*ast.BasicLit)
				out = append(out, wire.Code(strings.Trim(lit.Value, `"`)))
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("found no Code constants in wire/errors.go")
	}
	return out
}

// TestCauseLoggedNeverSent: an error that wraps a cause (a driver error, a
// path, a resolver address) answers with its code and message only; the
// cause reaches the log, once.
func TestCauseLoggedNeverSent(t *testing.T) {
	t.Parallel()
	const secret = "dial tcp 10.1.2.3:5432: secret-host-detail"
	cases := []struct {
		name string
		err  error
		code wire.Code
	}{
		{"wrapped", wire.Wrap(wire.CodeBackendUnavailable, "test: op", errors.New(secret), "the backend is unavailable"), wire.CodeBackendUnavailable},
		{"plain", fmt.Errorf("reading: %w", errors.New(secret)), wire.CodeInternal},
		{"store", fmt.Errorf("%w: %s", evidence.ErrUnavailable, secret), wire.CodeEvidenceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
			e := echo.New()
			rec := httptest.NewRecorder()
			c := e.NewContext(httptest.NewRequest(http.MethodGet, "/x", nil), rec)
			s.errorHandler(tc.err, c)
			if rec.Code != statusOf(tc.code) {
				t.Errorf("status %d, want %d", rec.Code, statusOf(tc.code))
			}
			var body wire.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == nil || body.Error.Code != tc.code {
				t.Fatalf("body %s: want code %s", rec.Body, tc.code)
			}
			if strings.Contains(rec.Body.String(), "secret-host-detail") {
				t.Errorf("the cause reached the client: %s", rec.Body)
			}
			if !strings.Contains(logs.String(), "secret-host-detail") {
				t.Errorf("the cause was not logged: %q", logs.String())
			}
		})
	}
}
