// Package tests holds Portcullis' end-to-end acceptance suite. It builds the
// real gateway binary once, starts it as a real process per test group against
// the embedded SQLite store and a real PostgreSQL, and drives it over HTTP the
// way an agent SDK or an auditor would. Everything lives in _test.go files;
// this file only documents the package.
package tests
