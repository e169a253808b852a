package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/leasekeeper/leasekeeper/apitype"
)

// DeleteCard deletes a card and its runs (operator; DESIGN.md#retention).
// A claimed card is refused unless force, which force-releases it first.
func (c *Client) DeleteCard(ctx context.Context, id string, force bool) (apitype.DeleteCardResponse, error) {
	var resp apitype.DeleteCardResponse
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	err := c.do(ctx, http.MethodDelete, cardURL(id, ""), q, nil, &resp)
	return resp, err
}

// Prune deletes, now, the runs of finished cards and the events older than
// r.OlderThanMS (the agent's retention age when 0), at most r.Limit of
// each (operator; DESIGN.md#retention).
func (c *Client) Prune(ctx context.Context, r apitype.PruneRequest) (apitype.PruneResponse, error) {
	var resp apitype.PruneResponse
	err := c.do(ctx, http.MethodPost, "/v1/prune", nil, r, &resp)
	return resp, err
}
