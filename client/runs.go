package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// RunFilter selects the runs ListRuns returns; every field is optional.
type RunFilter struct {
	Card   string          // only this card's runs
	Status board.RunStatus // only runs in this status
	Limit  int             // at most this many, the newest (0: no limit)
}

// ListRuns lists runs, newest first (GET /v1/runs). Without f.Card the
// agent reads every run of the board, one store read each.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) ([]board.Run, error) {
	q := url.Values{}
	if f.Card != "" {
		q.Set("card", f.Card)
	}
	if f.Status != "" {
		q.Set("status", string(f.Status))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var resp apitype.ListRunsResponse
	err := c.do(ctx, http.MethodGet, "/v1/runs", q, nil, &resp)
	return resp.Runs, err
}
