package wire

// ExecData is Exec's output.data, as the tool writes it and the SDKs read
// it: one definition, so the two cannot drift. Its JSON encoding is what
// the receipt's output_sha256 covers.
type ExecData struct {
	ExitCode        int     `json:"exit_code"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	TimedOut        bool    `json:"timed_out"`
	Signal          *string `json:"signal"`
	DurationMS      int64   `json:"duration_ms"`
}
