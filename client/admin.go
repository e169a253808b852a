package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// Board administration (operator). Each call runs one sweep in the agent
// to completion and returns its report; cards still contended after every
// attempt are listed in SweepReport.Contended rather than failing the call.
// SweepOptions, given, make it a dry run or report its progress.

// SweepOptions are a sweep's optional modes.
type SweepOptions struct {
	// DryRun: the agent decides and writes nothing; the report lists the
	// cards the sweep would change (SweepReport.DryRun is set).
	DryRun bool
	// Progress, when set, is called as the agent walks the cards: every
	// 100 cards and at the last one.
	Progress func(apitype.SweepProgress)
}

// RenameState renames a state; its cards move with reason state_rename.
func (c *Client) RenameState(ctx context.Context, from, to string, o ...SweepOptions) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/states/rename", apitype.RenameRequest{From: from, To: to}, o...)
}

// DeleteState deletes a state, moving its cards into another with reason
// state_delete. Out of a terminal state into a working one it is a bulk
// reopen, refused with board.ErrTransitionRejected while one of those cards
// has a dependent outside waiting_deps.
func (c *Client) DeleteState(ctx context.Context, state, into string, o ...SweepOptions) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/states/delete", apitype.DeleteStateRequest{State: state, Into: into}, o...)
}

// RenameLabel renames a label on every card.
func (c *Client) RenameLabel(ctx context.Context, from, to string, o ...SweepOptions) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/rename", apitype.RenameRequest{From: from, To: to}, o...)
}

// MergeLabels replaces each of the from labels by into on every card.
func (c *Client) MergeLabels(ctx context.Context, from []string, into string, o ...SweepOptions) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/merge", apitype.MergeLabelsRequest{From: from, Into: into}, o...)
}

// DeleteLabel removes a label from every card.
func (c *Client) DeleteLabel(ctx context.Context, label string, o ...SweepOptions) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/delete", apitype.DeleteLabelRequest{Label: label}, o...)
}

func (c *Client) sweep(ctx context.Context, path string, body any, opts ...SweepOptions) (board.SweepReport, error) {
	var o SweepOptions
	for _, x := range opts {
		o.DryRun = o.DryRun || x.DryRun
		if x.Progress != nil {
			o.Progress = x.Progress
		}
	}
	q := url.Values{}
	if o.DryRun {
		q.Set("dry_run", "true")
	}
	var rep board.SweepReport
	if o.Progress == nil {
		err := c.do(ctx, http.MethodPost, path, q, body, &rep)
		return rep, err
	}
	q.Set("progress", "true")
	req, err := c.request(ctx, http.MethodPost, path, q, body)
	if err != nil {
		return rep, err
	}
	resp, err := c.stream.Do(req)
	if err != nil {
		return rep, fmt.Errorf("leasekeeper agent at %s: %w", c.SocketPath(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return rep, decodeError(resp)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var f apitype.SweepFrame
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the report never came
			}
			return rep, fmt.Errorf("reading the agent's answer to %s: %w", path, err)
		}
		switch {
		case f.Error != nil:
			return rep, &apitype.Error{Status: apitype.StatusOf(f.Error.Code), Body: *f.Error}
		case f.Report != nil:
			return *f.Report, nil
		case f.Progress != nil:
			o.Progress(*f.Progress)
		}
	}
}
