package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

func cardURL(id string, rest string) string { return "/v1/cards/" + url.PathEscape(id) + rest }

// CreateCard creates a card (operator).
func (c *Client) CreateCard(ctx context.Context, nc board.CreateCardParams) (board.Card, error) {
	var card board.Card
	err := c.do(ctx, http.MethodPost, "/v1/cards", nil, nc, &card)
	return card, err
}

// ListCards lists cards, oldest first.
func (c *Client) ListCards(ctx context.Context, f board.ListCardsParams) ([]board.Card, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", f.State)
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.ClaimedOnly {
		q.Set("claimed", "true")
	}
	var resp apitype.ListCardsResponse
	err := c.do(ctx, http.MethodGet, "/v1/cards", q, nil, &resp)
	return resp.Cards, err
}

// GetCard reads one card.
func (c *Client) GetCard(ctx context.Context, id string) (board.Card, error) {
	var card board.Card
	err := c.do(ctx, http.MethodGet, cardURL(id, ""), nil, nil, &card)
	return card, err
}

// GetRun reads one run.
func (c *Client) GetRun(ctx context.Context, id string) (board.Run, error) {
	var run board.Run
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(id), nil, nil, &run)
	return run, err
}

// MoveCard is an operator state move; leaving a terminal state is
// board.ErrTerminalStateExit (use ReopenCard).
func (c *Client) MoveCard(ctx context.Context, id, to string) (board.Card, error) {
	var card board.Card
	err := c.do(ctx, http.MethodPut, cardURL(id, "/state"), nil, apitype.MoveRequest{To: to}, &card)
	return card, err
}

// ReopenCard moves a terminal card back to a working state.
func (c *Client) ReopenCard(ctx context.Context, id, to string) (board.Card, error) {
	var card board.Card
	err := c.do(ctx, http.MethodPost, cardURL(id, "/reopen"), nil, apitype.MoveRequest{To: to}, &card)
	return card, err
}

// AdjustLabels adds then removes labels in one atomic step (removes win).
func (c *Client) AdjustLabels(ctx context.Context, id string, add, remove []string) (board.Card, error) {
	var card board.Card
	err := c.do(ctx, http.MethodPatch, cardURL(id, "/labels"), nil, apitype.AdjustLabelsRequest{Add: add, Remove: remove}, &card)
	return card, err
}

// SetLabels replaces the label set (absolute by contract).
func (c *Client) SetLabels(ctx context.Context, id string, labels []string) (board.Card, error) {
	if labels == nil {
		labels = []string{}
	}
	var card board.Card
	err := c.do(ctx, http.MethodPut, cardURL(id, "/labels"), nil, apitype.SetLabelsRequest{Labels: labels}, &card)
	return card, err
}

// ForceRelease breaks whatever claim the card carries (operator steal).
func (c *Client) ForceRelease(ctx context.Context, id string) (apitype.ForceReleaseResponse, error) {
	var resp apitype.ForceReleaseResponse
	err := c.do(ctx, http.MethodDelete, cardURL(id, "/claim"), nil, nil, &resp)
	return resp, err
}

// Status describes the agent.
func (c *Client) Status(ctx context.Context) (apitype.Status, error) {
	var st apitype.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &st)
	return st, err
}

// Events returns up to limit events with Seq > after.
func (c *Client) Events(ctx context.Context, after int64, limit int) ([]board.Event, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var resp apitype.EventsResponse
	err := c.do(ctx, http.MethodGet, "/v1/events", q, nil, &resp)
	return resp.Events, err
}

// FollowEvents streams events with Seq > after to fn until ctx ends, the
// stream breaks or fn returns an error.
func (c *Client) FollowEvents(ctx context.Context, after int64, fn func(board.Event) error) error {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "follow": {"true"}}
	resp, err := c.openStream(ctx, "/v1/events", q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev board.Event
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// ReaperPass runs one watchdog pass now (dryRun: decide, change nothing).
func (c *Client) ReaperPass(ctx context.Context, dryRun bool) (apitype.ReaperPass, error) {
	var pass apitype.ReaperPass
	q := url.Values{}
	if dryRun {
		q.Set("dry_run", "true")
	}
	err := c.do(ctx, http.MethodPost, "/v1/reaper/pass", q, nil, &pass)
	return pass, err
}

// Board reads the board the agent serves: its states and flags. Callers
// route cards by its columns (Running, FirstPool, Completion...) rather than
// by the default board's names.
func (c *Client) Board(ctx context.Context) (board.Board, error) {
	var resp apitype.BoardResponse
	if err := c.do(ctx, http.MethodGet, "/v1/board", nil, nil, &resp); err != nil {
		return board.Board{}, err
	}
	return board.Board{States: resp.States, Retry: resp.Retry}, nil
}

// SetBoardRetry sets the board's default retry policy (operator;
// DESIGN.md#retries): p's zero fields take the defaults. It returns the
// board as stored after the write.
func (c *Client) SetBoardRetry(ctx context.Context, p board.RetryPolicy) (board.Board, error) {
	var resp apitype.BoardResponse
	if err := c.do(ctx, http.MethodPost, "/v1/board/retry", nil, apitype.BoardRetryRequest(p), &resp); err != nil {
		return board.Board{}, err
	}
	return board.Board{States: resp.States, Retry: resp.Retry}, nil
}
