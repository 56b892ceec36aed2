package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/meshd/meshd/codes"
)

// The config checker: `meshd check-config`, meshd's start and every reload
// read meshd.yaml through Check, which reports every problem of a
// file at once, each with its YAML line, field path, bad value, what is
// allowed and, for an unknown key, the known key it most likely meant.
// The file is parsed into a yaml.Node (for the lines) and decoded field by
// field against File's yaml tags; Validate then checks the values.

// Errors is every problem found in one config, in the order of the
// file (decode problems) then of Validate's checks. It carries
// codes.ConfigInvalid where it is returned.
type Errors struct {
	Path     string // the file; empty when only values were checked
	Problems []*Error
}

func (e *Errors) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].Error())
		return b.String()
	}
	b.WriteString(e.Count() + ": ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find each *Error.
func (e *Errors) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// Lines are the file and its count of problems, then the problems one to
// a line: the details of a refused reload (apitype.Error.Details).
func (e *Errors) Lines() []string {
	var out []string
	if e.Path != "" {
		out = append(out, fmt.Sprintf("%s: %s", e.Path, e.Count()))
	}
	for _, p := range e.Problems {
		out = append(out, p.Error())
	}
	return out
}

// Count is "1 problem" or "N problems".
func (e *Errors) Count() string {
	if len(e.Problems) == 1 {
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", len(e.Problems))
}

func (e *Errors) add(field, value string, err error) {
	e.Problems = append(e.Problems, &Error{Field: field, Value: value, Err: err})
}

// failed reports whether any of fields already has a problem.
func (e *Errors) failed(fields ...string) bool {
	return slices.ContainsFunc(e.Problems, func(p *Error) bool { return slices.Contains(fields, p.Field) })
}

// err is nil without problems, else e coded ConfigInvalid.
func (e *Errors) err() error {
	if len(e.Problems) == 0 {
		return nil
	}
	return codes.Wrap(codes.ConfigInvalid, e)
}

// Check reads path over Default as Load does, lets
// override change the result (meshd's --state-dir and --socket; nil for
// none), validates it, and returns every problem at once as a coded
// *Errors whose problems name the line each value came from.
func Check(path string, mustExist bool, override func(*File)) (File, error) {
	cfg, d, err := loadConfig(path, mustExist)
	var probs Errors
	if err != nil && !errors.As(err, new(*Errors)) {
		return cfg, err // the file could not be read
	}
	if ce, ok := errors.AsType[*Errors](err); ok {
		probs = *ce
	}
	probs.Path = path
	fromFile := cfg
	if override != nil {
		override(&cfg)
	}
	flagged := ChangedFields(fromFile, cfg)
	decoded := Errors{Problems: slices.Clone(probs.Problems)}
	if verr, ok := errors.AsType[*Errors](cfg.Validate()); ok {
		for _, p := range verr.Problems {
			if decoded.failed(p.Field) {
				continue // its value is the default; the file's was refused above
			}
			switch {
			case slices.Contains(flagged, p.Field):
				p.Source = "flag"
			case d.lines[p.Field] > 0:
				// As the file has it ("2h", not Go's "2h0m0s").
				p.Line, p.Value = d.lines[p.Field], d.values[p.Field]
			default:
				p.Source = "default"
			}
			probs.Problems = append(probs.Problems, p)
		}
	}
	// File order: a problem Validate found on line 3 comes before an
	// unknown key on line 9; those from no line (defaults, flags) last.
	slices.SortStableFunc(probs.Problems, func(a, b *Error) int {
		return cmp.Compare(lineOrLast(a.Line), lineOrLast(b.Line))
	})
	return cfg, probs.err()
}

func lineOrLast(l int) int {
	if l == 0 {
		return 1 << 30
	}
	return l
}

// loadConfig is Load that also returns the decoder, which knows the
// line and text of each value set in the file.
func loadConfig(path string, mustExist bool) (File, *configDecoder, error) {
	cfg := Default()
	d := &configDecoder{lines: map[string]int{}, values: map[string]string{}}
	if path == "" {
		return cfg, d, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !mustExist {
		return cfg, d, nil
	}
	if err != nil {
		return cfg, d, codes.Wrap(codes.ConfigInvalid, fmt.Errorf("read config: %w", err))
	}
	d.decodeFile(b, &cfg)
	d.probs.Path = path
	return cfg, d, d.probs.err()
}

// configDecoder decodes a yaml.Node tree into a File, one field at
// a time, keeping every problem and the line and text of every value.
type configDecoder struct {
	lines  map[string]int
	values map[string]string
	probs  Errors
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *configDecoder) decodeFile(b []byte, cfg *File) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		p := &Error{Err: fmt.Errorf("not valid YAML: %w", err)}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			p.Line, _ = strconv.Atoi(m[1])
			p.Err = errors.New("not valid YAML: " + m[2])
		}
		d.probs.Problems = append(d.probs.Problems, p)
		return
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return // empty, or comments only
	}
	d.decode("", doc.Content[0], reflect.ValueOf(cfg).Elem())
}

func (d *configDecoder) bad(n *yaml.Node, field, value string, err error) {
	d.probs.Problems = append(d.probs.Problems, &Error{Line: n.Line, Field: field, Value: value, Err: err})
}

var (
	durationType    = reflect.TypeFor[time.Duration]()
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
)

// decode sets v from n; field is v's path ("raft.heartbeat_timeout").
func (d *configDecoder) decode(field string, n *yaml.Node, v reflect.Value) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if field != "" {
		d.lines[field], d.values[field] = n.Line, n.Value
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		// `key:` with no value, as yaml.v3 reads it: a list, mapping or
		// pointer becomes nil (which Validate may refuse: a firewall
		// list written empty by mistake is not any/any), a scalar keeps
		// the default.
		switch v.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface:
			v.Set(reflect.Zero(v.Type()))
		}
		return
	}
	switch {
	case v.Type() == durationType:
		d.duration(field, n, v)
		return
	case reflect.PointerTo(v.Type()).Implements(unmarshalerType):
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.bad(n, field, n.Value, err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(field, n, v)
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		d.decode(field, n, nv.Elem())
		v.Set(nv)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.bad(n, field, n.Value, errors.New("must be a list"))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(fmt.Sprintf("%s[%d]", field, i), e, s.Index(i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode || v.Type().Key().Kind() != reflect.String {
			d.bad(n, field, n.Value, errors.New("must be a mapping of names to values"))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			e := reflect.New(v.Type().Elem()).Elem()
			d.decode(field+"."+n.Content[i].Value, n.Content[i+1], e)
			m.SetMapIndex(reflect.ValueOf(n.Content[i].Value).Convert(v.Type().Key()), e)
		}
		v.Set(m)
	default:
		d.scalar(field, n, v)
	}
}

// mapping decodes a struct from a YAML mapping: an unknown key is a
// problem with a suggestion, a key given twice is a problem, and each
// known key's value is decoded on its own.
func (d *configDecoder) mapping(field string, n *yaml.Node, v reflect.Value) {
	keys := yamlKeys(v.Type())
	if n.Kind != yaml.MappingNode {
		d.bad(n, field, n.Value, fmt.Errorf("must be a mapping with the keys %s", strings.Join(keys, ", ")))
		return
	}
	prefix := ""
	if field != "" {
		prefix = field + "."
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := prefix + k.Value
		if first, dup := seen[k.Value]; dup {
			d.bad(k, name, "", fmt.Errorf("set twice (first at line %d); give each key once", first))
			continue
		}
		seen[k.Value] = k.Line
		idx := slices.Index(keys, k.Value)
		if idx < 0 {
			p := &Error{Line: k.Line, Field: name, Err: errors.New("unknown key"), Hint: suggestKey(k.Value, prefix, keys)}
			d.probs.Problems = append(d.probs.Problems, p)
			continue
		}
		d.decode(name, val, v.Field(fieldIndex(v.Type(), k.Value)))
	}
}

// duration decodes a Go duration string ("1s", "500ms", "1h30m"); a bare
// number is refused with the reason, as yaml.v3 would read it as
// nanoseconds.
func (d *configDecoder) duration(field string, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.bad(n, field, "", errors.New("must be a duration such as 500ms, 30s, 5m or 1h"))
		return
	}
	if n.Tag == "!!int" || n.Tag == "!!float" {
		d.bad(n, field, n.Value, fmt.Errorf("a duration needs a unit, e.g. %ss (ns, us, ms, s, m, h)", n.Value))
		return
	}
	t, err := time.ParseDuration(n.Value)
	if err != nil {
		d.bad(n, field, n.Value, errors.New("must be a duration such as 500ms, 30s, 5m or 1h"))
		return
	}
	v.SetInt(int64(t))
}

// scalar decodes a string, number or boolean.
func (d *configDecoder) scalar(field string, n *yaml.Node, v reflect.Value) {
	want := map[reflect.Kind]string{reflect.String: "a single value (a string)", reflect.Bool: "true or false"}[v.Kind()]
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "a whole number"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	}
	if n.Kind != yaml.ScalarNode {
		d.bad(n, field, "", fmt.Errorf("must be %s, not a %s", want, kindName(n.Kind)))
		return
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		d.bad(n, field, n.Value, fmt.Errorf("must be %s", want))
	}
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "value"
}
