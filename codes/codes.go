package codes

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
)

// Code is a stable identifier: 'X', a three-digit HTTP-like status, a
// three-digit number and a six-letter mnemonic, e.g. X401004TKNCNS.
// Codes are never renumbered or reused; tests and scripts match on them.
type Code string

// Info describes a code for people.
type Info struct {
	Status int    // HTTP-like status; 2xx codes are warnings, not failures
	Cause  string // one line: what happened
	Remedy string // one line: what to do about it
}

// Format is the shape every code has.
var Format = regexp.MustCompile(`^X[1-5]\d{2}\d{3}[A-Z]{6}$`)

// String returns the code itself.
func (c Code) String() string { return string(c) }

// Info returns the table entry for c; ok is false for a code not in the table.
func (c Code) Info() (Info, bool) {
	i, ok := table[c]
	return i, ok
}

// Status returns the HTTP-like status of c, or 500 for an unknown code.
func (c Code) Status() int {
	if i, ok := table[c]; ok {
		return i.Status
	}
	return 500
}

// Cause returns the one-line cause of c.
func (c Code) Cause() string { return table[c].Cause }

// Remedy returns the one-line remedy of c.
func (c Code) Remedy() string { return table[c].Remedy }

// Lookup finds a code by its text, as `meshctl explain` does.
func Lookup(s string) (Code, Info, bool) {
	c := Code(s)
	i, ok := table[c]
	return c, i, ok
}

// All returns every code in the table, sorted.
func All() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// Error is an error that carries a code. Its message is the wrapped error's;
// the code's cause and remedy are looked up from the table when shown.
type Error struct {
	Code Code
	Err  error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Code.Cause()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Wrap attaches code c to err. Attach a code once, where the user-facing
// meaning is known; a nil err gets the code's cause as its message.
func Wrap(c Code, err error) error {
	return &Error{Code: c, Err: err}
}

// Errorf is Wrap(c, fmt.Errorf(format, args...)).
func Errorf(c Code, format string, args ...any) error {
	return &Error{Code: c, Err: fmt.Errorf(format, args...)}
}

// Of returns the outermost code attached to err, or "" if none is.
func Of(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// OrInternal returns the code of err, or Internal when it carries none.
func OrInternal(err error) Code {
	if c := Of(err); c != "" {
		return c
	}
	return Internal
}
