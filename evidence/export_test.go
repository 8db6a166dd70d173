package evidence

// NewUnhashedWriter is a Writer that does not compute chain hashes, for
// BenchmarkWriter's chains-off case only.
func NewUnhashedWriter(store Store, opts WriterOptions) *Writer {
	return newWriter(store, opts, true)
}

// LegacyChainHash is the v2 chain hash, which Verify still accepts.
var LegacyChainHash = legacyChainHash
