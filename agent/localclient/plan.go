package localclient

import (
	"context"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// Plan runs a join's preflight checks (`meshctl join --plan`) and calls
// check for every check as it finishes. It returns the result once every
// check has run, whether they passed or not (see PlanResult.OK); an error
// means the plan itself could not run. Nothing is written and the token
// stays unused.
func (c *Client) Plan(ctx context.Context, req apitype.JoinRequest, check func(apitype.PlanCheck)) (*apitype.PlanResult, error) {
	resp, err := c.do(ctx, http.MethodPost, apitype.PathJoinPlan, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res *apitype.PlanResult
	err = readLines(resp.Body, "plan", codes.Internal, func(l apitype.PlanLine) (bool, error) {
		switch {
		case l.Error != nil:
			return true, l.Error
		case l.Result != nil:
			res = l.Result
			return true, nil
		case l.Check != nil && check != nil:
			check(*l.Check)
		}
		return false, nil
	})
	return res, err
}
