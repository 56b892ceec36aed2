package main

import (
	"errors"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// joinFailed ends a failed `join -o json`: the last JSON line is
// {"error": {code, cause, remedy, detail}}, so a script reading the stream
// always gets a final object (the result, or this); stderr and the exit
// code are as for every failure. It returns err.
func (a *app) joinFailed(err error, asJSON bool) error {
	if !asJSON {
		return err
	}
	var e *apitype.Error
	if !errors.As(err, &e) {
		e = apitype.NewError(codes.OrInternal(err), err)
	}
	a.printJoinLine(apitype.JoinLine{Error: e}, true)
	return err
}
