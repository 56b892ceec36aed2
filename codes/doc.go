// Package codes is the table of stable error and event codes that meshd and
// meshctl show to people: each code has an HTTP-like status, one line of
// cause and one line of remedy.
//
// Import rule (deps_test.go): may import no meshd package. Every other meshd
// package may import codes.
package codes
