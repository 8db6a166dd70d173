module example.com/portcullis-quickstart

// The Go quickstart is a module of its own, as an agent's project is: it
// needs only the SDK. The replaces point at this checkout; an agent using
// a released SDK drops them (go get github.com/portcullis/portcullis/sdk).
go 1.24.0

require (
	github.com/portcullis/portcullis/sdk v0.1.0
	github.com/portcullis/portcullis/wire v0.1.0
)

require (
	go.opentelemetry.io/otel v1.38.0 // indirect
	go.opentelemetry.io/otel/trace v1.38.0 // indirect
)

replace (
	github.com/portcullis/portcullis/sdk => ../../sdk
	github.com/portcullis/portcullis/wire => ../../wire
)
