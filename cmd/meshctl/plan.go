package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

// runPlan is `meshctl join --plan`: every check as meshd runs it, then the
// verdict. It exits 0 only when a real join would pass every check;
// otherwise the first failed check's code goes to stderr (exit 1). With
// -o json, stdout holds the whole result as one document.
func (a *app) runPlan(cmd *cobra.Command, req apitype.JoinRequest) error {
	asJSON, err := a.json()
	if err != nil {
		return err
	}
	res, err := a.client().Plan(cmd.Context(), req, func(c apitype.PlanCheck) {
		if !asJSON {
			a.printCheck(c)
		}
	})
	if err != nil {
		return err
	}
	if asJSON {
		if err := a.printJSON(res); err != nil {
			return err
		}
	}
	f := res.Failed()
	if f == nil {
		if !asJSON {
			a.out.Println("plan: a join with this token would pass every check; the token is still unused")
		}
		return nil
	}
	return apitype.NewError(f.Code, errors.New(f.Name+": "+f.Detail))
}

// printCheck prints one check: its status (or code), its name, what it
// found.
func (a *app) printCheck(c apitype.PlanCheck) {
	status := string(c.Status)
	if c.Code != "" {
		status = fmt.Sprintf("%s %s", c.Status, c.Code)
	}
	a.out.Printf("%-20s %-28s %s\n", status, c.Name, c.Detail)
}
