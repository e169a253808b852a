package board

import "time"

// The store verbs have one shape (DESIGN.md#verb-shape):
//
//	Verb(ctx, VerbParams) (VerbResult, error)
//
// A verb with nothing to answer returns only the error, a verb with no
// input (LoadBoard, Now, CountCards) takes only the context, and a verb whose answer is
// one domain value (a Card, a Run, a list of them) returns that value. The
// request and answer types of the larger verbs live beside their families
// (store.go, admin.go, retention.go); these are the small ones.

// GetCardParams names the card GetCard reads.
type GetCardParams struct {
	ID string `json:"id"`
}

// DependentsParams names the card whose dependents Dependents lists.
type DependentsParams struct {
	ID string `json:"id"`
}

// GetRunParams names the run GetRun reads.
type GetRunParams struct {
	ID string `json:"id"`
}

// SetLabelsParams replaces a card's label set (SetLabels).
type SetLabelsParams struct {
	Card   string   `json:"card"`
	Labels []string `json:"labels"`
	Actor  string   `json:"actor,omitempty"`
}

// ReleaseParams is the operator's force-release of the claim Marker holds
// on Card, at any epoch (Release).
type ReleaseParams struct {
	Card   string `json:"card"`
	Marker string `json:"marker"`
	Actor  string `json:"actor,omitempty"`
}

// RenewClaimsParams is the heartbeat's batch: every hold's lease pushed to
// now+Lease (RenewClaims).
type RenewClaimsParams struct {
	Holds []Hold        `json:"holds"`
	Lease time.Duration `json:"lease"`
}

// OwnedParams names a card and the claim token its holder writes under:
// the input of the fenced writes that carry nothing else (ReleaseOwned,
// ExpireClaimOwned, DisownClaimOwned).
type OwnedParams struct {
	Card  string     `json:"card"`
	Token ClaimToken `json:"token"`
}

// SetLastRunOwnedParams points Card at RunID under Token (SetLastRunOwned).
type SetLastRunOwnedParams struct {
	Card  string     `json:"card"`
	Token ClaimToken `json:"token"`
	RunID string     `json:"run_id"`
}

// SetAwaitingInputOwnedParams sets the card's awaiting-input flag under
// Token (SetAwaitingInputOwned).
type SetAwaitingInputOwnedParams struct {
	Card     string     `json:"card"`
	Token    ClaimToken `json:"token"`
	Awaiting bool       `json:"awaiting"`
}

// SetGaveUpOwnedParams stamps (or, with a nil GaveUp, clears) the card's
// give-up record under Token (SetGaveUpOwned).
type SetGaveUpOwnedParams struct {
	Card   string     `json:"card"`
	Token  ClaimToken `json:"token"`
	GaveUp *GaveUp    `json:"gave_up,omitempty"`
}

// ListUnleasedRunningClaimsParams bounds the listing of claims with no
// lease (ListUnleasedRunningClaims).
type ListUnleasedRunningClaimsParams struct {
	Cutoff time.Time `json:"cutoff"`
	Limit  int       `json:"limit"`
}

// EventsParams asks for the events after Seq After, at most Limit (Events).
type EventsParams struct {
	After int64 `json:"after"`
	Limit int   `json:"limit"`
}

// MoveResult says whether a compare-and-set move moved the card
// (SetStateFrom, SetStateOwned): false is drift, with nothing written.
type MoveResult struct {
	Changed bool `json:"changed"`
}
