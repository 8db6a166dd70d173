// Package archtest holds the layering test: which project packages each
// package may import (docs/architecture.md, "Packages"). It has no code of
// its own.
package archtest
