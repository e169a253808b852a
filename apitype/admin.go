package apitype

import "github.com/leasekeeper/leasekeeper/board"

// Board administration requests (operator routes under /v1/board/). Names
// travel in the body, never in the path, so a label may hold any printable
// character. Each route answers with a board.SweepReport, or, asked for
// its progress, with a stream of SweepFrame.

// RenameRequest renames a state or a label: From becomes To.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// DeleteStateRequest deletes State, moving its cards into Into.
type DeleteStateRequest struct {
	State string `json:"state"`
	Into  string `json:"into"`
}

// MergeLabelsRequest replaces every label of From by Into on every card.
type MergeLabelsRequest struct {
	From []string `json:"from"`
	Into string   `json:"into"`
}

// BoardRetryRequest sets the board's default retry policy
// (DESIGN.md#retries): max_attempts, backoff and backoff_max, each
// optional (absent: the default). It answers with the board as stored.
type BoardRetryRequest = board.RetryPolicy

// DeleteLabelRequest removes Label from every card.
type DeleteLabelRequest struct {
	Label string `json:"label"`
}

// SweepFrame is one line of a board route's answer when the request asked
// for its progress (?progress=true): NDJSON, Progress frames as the walk
// goes, then exactly one frame with Report, or with Error when the walk
// failed after its first frame was sent (an error before it is an
// ordinary error answer).
type SweepFrame struct {
	Progress *SweepProgress     `json:"progress,omitempty"`
	Report   *board.SweepReport `json:"report,omitempty"`
	Error    *ErrorBody         `json:"error,omitempty"`
}

// SweepProgress is how far a walk got: Done of the Total cards of the
// snapshot it walks.
type SweepProgress struct {
	Done  int `json:"done"`
	Total int `json:"total"`
}
