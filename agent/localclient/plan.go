package localclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return nil, apitype.NewError(codes.Internal, errors.New("plan stream ended without a result"))
			}
			return nil, apitype.NewError(codes.Internal, fmt.Errorf("plan stream broke: %v", err))
		}
		var l apitype.PlanLine
		if err := json.Unmarshal(line, &l); err != nil {
			return nil, apitype.NewError(codes.Internal, fmt.Errorf("bad plan stream line: %v", err))
		}
		switch {
		case l.Error != nil:
			return nil, l.Error
		case l.Result != nil:
			return l.Result, nil
		case l.Check != nil && check != nil:
			check(*l.Check)
		}
	}
}
