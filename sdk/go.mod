module github.com/portcullis/portcullis/sdk

// The Go SDK is its own module so that an agent importing it gets the
// client and the wire vocabulary only, none of the server's dependencies
// (OPA, pgx, SQLite ...). A release tags wire/vX.Y.Z and sdk/vX.Y.Z
// together; the replace below serves development inside this repository
// and is ignored by modules that import the SDK.
go 1.24.0

require (
	github.com/portcullis/portcullis/wire v0.1.0
	go.opentelemetry.io/otel v1.38.0
	go.opentelemetry.io/otel/trace v1.38.0
)

replace github.com/portcullis/portcullis/wire => ../wire
