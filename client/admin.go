package client

import (
	"context"
	"net/http"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// Board administration (operator). Each call runs one sweep in the agent
// to completion and returns its report; cards still contended after every
// attempt are listed in SweepReport.Contended rather than failing the call.

// RenameState renames a state; its cards move with reason state_rename.
func (c *Client) RenameState(ctx context.Context, from, to string) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/states/rename", apitype.RenameRequest{From: from, To: to})
}

// DeleteState deletes a state, moving its cards into another with reason
// state_delete. Out of a terminal state into a working one it is a bulk
// reopen, refused with board.ErrTransitionRejected while one of those cards
// has a dependent outside waiting_deps.
func (c *Client) DeleteState(ctx context.Context, state, into string) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/states/delete", apitype.DeleteStateRequest{State: state, Into: into})
}

// RenameLabel renames a label on every card.
func (c *Client) RenameLabel(ctx context.Context, from, to string) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/rename", apitype.RenameRequest{From: from, To: to})
}

// MergeLabels replaces each of the from labels by into on every card.
func (c *Client) MergeLabels(ctx context.Context, from []string, into string) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/merge", apitype.MergeLabelsRequest{From: from, Into: into})
}

// DeleteLabel removes a label from every card.
func (c *Client) DeleteLabel(ctx context.Context, label string) (board.SweepReport, error) {
	return c.sweep(ctx, "/v1/board/labels/delete", apitype.DeleteLabelRequest{Label: label})
}

func (c *Client) sweep(ctx context.Context, path string, body any) (board.SweepReport, error) {
	var rep board.SweepReport
	err := c.do(ctx, http.MethodPost, path, nil, body, &rep)
	return rep, err
}
