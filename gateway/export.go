package gateway

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/portcullis/portcullis/wire"
)

// exportPage is how many receipts one store query fetches while exporting;
// the export walks the range page by page (keyset), never holding it whole.
const exportPage = 1000

// csvHeader names the CSV export's columns, one receipt per row. New
// columns go at the end so existing column positions never move; rule_ids
// is space-separated (a rule id holds no space).
var csvHeader = []string{"id", "time", "principal_id", "session_id", "call_id", "tool", "decision", "reasons",
	"policy_revision", "args_sha256", "status", "error_code", "exit_code", "output_sha256", "duration_ms",
	"backend", "trace_id", "parent_receipt_id", "rule_ids"}

// exportReceipts is GET /v1/receipts/export?format=jsonl|csv plus the list
// filters: it streams every matching receipt, newest first. limit, when
// given, caps the total.
func (s *Server) exportReceipts(c echo.Context) error {
	format := c.QueryParam("format")
	if format == "" {
		format = "jsonl"
	}
	if format != "jsonl" && format != "csv" {
		return wire.FieldError(wire.CodeInvalidInput, "format", "format must be jsonl or csv")
	}
	f, err := parseFilter(c, math.MaxInt32, "format")
	if err != nil {
		return err
	}
	f.Tool = s.canonicalToolName(f.Tool)
	total := f.Limit
	f.Limit = exportPage
	// Ask for the first page before committing the status, so a bad cursor
	// or an unreachable store still answers with a proper error.
	ctx := c.Request().Context()
	page, err := s.opts.Receipts.Receipts(ctx, f)
	if err != nil {
		return err
	}
	w := c.Response()
	name := "receipts-" + time.Now().UTC().Format("20060102T150405Z")
	if format == "csv" {
		w.Header().Set(echo.HeaderContentType, "text/csv; charset=utf-8")
		w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.csv"`)
	} else {
		w.Header().Set(echo.HeaderContentType, "application/x-ndjson")
		w.Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+name+`.jsonl"`)
	}
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	cw := csv.NewWriter(w)
	if format == "csv" {
		_ = cw.Write(csvHeader)
	}
	written := 0
	for {
		for _, r := range page.Receipts {
			if total > 0 && written >= total {
				cw.Flush()
				return nil
			}
			if format == "csv" {
				err = cw.Write(csvRow(r))
			} else {
				err = enc.Encode(r)
			}
			if err != nil {
				return nil // the client went away
			}
			written++
		}
		if format == "csv" {
			cw.Flush()
		}
		w.Flush()
		if page.NextCursor == "" || len(page.Receipts) == 0 {
			return nil
		}
		f.Cursor = page.NextCursor
		if page, err = s.opts.Receipts.Receipts(ctx, f); err != nil {
			// The status is sent; say so in-band and in the log.
			s.log.ErrorContext(ctx, "export interrupted", "err", err, "written", written)
			if format == "jsonl" {
				_ = enc.Encode(wire.ErrorBody{Error: toWireError(err)})
			}
			return nil
		}
	}
}

func csvRow(r wire.Receipt) []string {
	row := []string{r.ID, r.Time.UTC().Format(time.RFC3339Nano), r.PrincipalID, r.SessionID, r.CallID, r.Tool,
		r.Decision, strings.Join(r.Reasons, "; "), r.PolicyRevision, r.ArgsSHA256,
		"", "", "", "", "", "", r.TraceID, "", strings.Join(r.RuleIDs, " ")}
	if o := r.Outcome; o != nil {
		row[10] = o.Status
		if o.ErrorCode != nil {
			row[11] = *o.ErrorCode
		}
		if o.ExitCode != nil {
			row[12] = strconv.Itoa(*o.ExitCode)
		}
		row[13], row[14], row[15] = o.OutputSHA256, strconv.FormatInt(o.DurationMS, 10), o.Backend
	}
	if r.ParentReceiptID != nil {
		row[17] = *r.ParentReceiptID
	}
	for i, v := range row {
		row[i] = csvSafe(v)
	}
	return row
}

// csvSafe defuses spreadsheet formula injection: a cell an attacker could
// shape (reasons, ids, call ids) never starts with = + - @ or a tab.
func csvSafe(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
		return "'" + v
	}
	return v
}

// CSVHeader and CSVRow expose the export's CSV shape so `gateway evidence
// export` writes exactly the columns GET /v1/receipts/export does, with
// the same formula-injection defusing.
func CSVHeader() []string { return append([]string(nil), csvHeader...) }

// CSVRow is one receipt as a CSV export row.
func CSVRow(r wire.Receipt) []string { return csvRow(r) }
