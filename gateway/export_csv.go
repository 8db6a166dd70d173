package gateway

import "github.com/portcullis/portcullis/wire"

// CSVHeader and CSVRow expose the export's CSV shape so `gateway evidence
// export` writes exactly the columns GET /v1/receipts/export does, with
// the same formula-injection defusing.
func CSVHeader() []string { return append([]string(nil), csvHeader...) }

// CSVRow is one receipt as a CSV export row.
func CSVRow(r wire.Receipt) []string { return csvRow(r) }
