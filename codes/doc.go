// Package codes is the table of stable error and event codes that meshd and
// meshctl show to people: each code has an HTTP-like status, one line of
// cause and one line of remedy.
//
// Import rule: standard library only. Every other meshd package may import
// codes; codes imports none of them.
package codes
