//go:build !linux || android || e2e_testing

package nebula

// osStartupOnlyKeys is empty, none of the OS specific startup keys matter here
var osStartupOnlyKeys []string
