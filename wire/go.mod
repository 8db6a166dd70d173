module github.com/portcullis/portcullis/wire

// wire is its own module so that the Go SDK (and anything else that speaks
// the gateway's vocabulary) imports it without the server's dependencies.
// It must stay dependency-free: it imports only the standard library.
go 1.24.0
