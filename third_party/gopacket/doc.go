// Package gopacket is empty: only its layers subpackage's IP protocol
// numbers are kept (see layers/enums.go for why meshd replaces the
// module). It exists because Nebula's control_tester.go, built only with
// Nebula's own e2e_testing tag, imports it, and `go mod tidy` looks at
// every build tag; meshd never builds with that tag.
package gopacket
