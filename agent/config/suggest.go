package config

import (
	"reflect"
	"strings"
)

// yamlName is a struct field's key in meshd.yaml.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name
}

// yamlKeys are the keys of struct type t, in field order.
func yamlKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && yamlName(f) != "-" {
			out = append(out, yamlName(f))
		}
	}
	return out
}

func fieldIndex(t reflect.Type, key string) int {
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && yamlName(f) == key {
			return i
		}
	}
	return -1
}

// allKeyPaths is every key path of File ("raft.heartbeat_timeout"),
// for suggesting a key given at the wrong level.
func allKeyPaths() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || yamlName(f) == "-" {
				continue
			}
			out = append(out, prefix+yamlName(f))
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(prefix+yamlName(f)+".", f.Type)
			}
		}
	}
	walk("", reflect.TypeFor[File]())
	return out
}

// suggestKey is the "did you mean" of an unknown key: the nearest key of
// the same mapping (edit distance, a swap of two letters counting one), or
// else a key of that name, or near it, elsewhere in the file's layout
// ("heartbeat_timeout" at the top level: raft.heartbeat_timeout). Empty
// when nothing is near.
func suggestKey(key, prefix string, keys []string) string {
	near := func(cand string) (int, bool) {
		dist := editDistance(strings.ToLower(key), cand)
		return dist, dist <= max(1, min(3, len(key)/3))
	}
	best, bestDist := "", 1<<30
	for _, k := range keys {
		if dist, ok := near(k); ok && dist < bestDist {
			best, bestDist = prefix+k, dist
		}
	}
	if best != "" {
		return best
	}
	for _, p := range allKeyPaths() {
		leaf := p[strings.LastIndex(p, ".")+1:]
		if !strings.HasPrefix(p, prefix) || strings.Contains(p[len(prefix):], ".") {
			if dist, ok := near(leaf); ok && dist < bestDist {
				best, bestDist = p, dist
			}
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of two adjacent letters
// each count one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
