package apitype

import "github.com/leasekeeper/leasekeeper/board"

// ListRunsResponse lists runs (GET /v1/runs), newest first.
type ListRunsResponse struct {
	Runs []board.Run `json:"runs"`
}
