package control

import "slices"

// rotated is seeds starting at the k-th (modulo their number).
func rotated(seeds []string, k int) []string {
	if len(seeds) == 0 {
		return seeds
	}
	k %= len(seeds)
	return append(slices.Clone(seeds[k:]), seeds[:k]...)
}
