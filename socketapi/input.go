package socketapi

import (
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// The socket's own input rules. Every name a request carries — in its
// path, its query or its body — is checked here, with the board's rules,
// before any of it reaches the store, for reads as for writes: reads are
// open to any peer that can connect, and the store may sit behind a
// process boundary that a malformed name must never cross (a protobuf
// string cannot carry bytes that are not UTF-8). A refusal is the API's
// usual 400 invalid_argument.

// pathName is the path wildcard key, checked as a name of kind.
func pathName(r *http.Request, key, kind string) (string, error) {
	v := r.PathValue(key)
	return v, board.ValidateName(kind, v)
}

// queryName is the optional query parameter key, checked as a name of
// kind when present.
func queryName(r *http.Request, key, kind string) (string, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return "", nil
	}
	return v, board.ValidateName(kind, v)
}

// checkUTF8 refuses a body that is not valid UTF-8. encoding/json would
// not: it replaces every invalid byte of a string with U+FFFD, so a card id
// "\xff" would be stored as "\uFFFD", a name the caller never sent.
func checkUTF8(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n <= 1 {
			return board.Invalid("request body is not valid UTF-8 (byte %d is %#02x)", i, body[i])
		}
		i += n
	}
	return nil
}

// optionalName checks v as a name of kind unless it is empty.
func optionalName(kind, v string) error {
	if v == "" {
		return nil
	}
	return board.ValidateName(kind, v)
}

// firstErr is the first refusal of errs, in the order the request's fields
// are documented, so the answer names one field.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNames checks every name of v against kind, stopping at the first
// refusal.
func checkNames(kind string, vs []string) error {
	for _, v := range vs {
		if err := board.ValidateName(kind, v); err != nil {
			return err
		}
	}
	return nil
}

// checkBody checks the names of a decoded request body, with the same rules
// the store applies, so a malformed one is refused at the socket. Values
// that only the stored board can judge (does the state exist, is the card
// there) are still the store's to check.
func checkBody(r *http.Request, v any) error {
	switch req := v.(type) {
	case *apitype.ClaimRequest:
		return optionalName("card id", req.Card)
	case *apitype.BoardRetryRequest:
		return req.Validate()
	case *apitype.SetStateRequest:
		return firstErr(board.ValidateName("state", req.To), optionalName("from state", req.From),
			board.ValidateText("reason", string(req.Reason)))
	case *apitype.SetLastRunRequest:
		return board.ValidateName("run id", req.RunID)
	case *apitype.SetAwaitingInputRequest:
		return nil
	case *apitype.SetGaveUpRequest:
		if req.GaveUp == nil {
			return nil
		}
		return firstErr(board.ValidateGaveUp(r.PathValue("card"), *req.GaveUp), optionalName("give-up state", req.GaveUp.State))
	case *apitype.StartRunRequest:
		if req.Status != "" && !req.Status.Known() {
			return board.Invalid("unknown run status %q", req.Status)
		}
		return firstErr(optionalName("run id", req.ID), board.ValidateCheckpoint(req.Checkpoint))
	case *apitype.StartRequest:
		if req.Status != "" && req.Status != board.RunRunning && req.Status != board.RunQueued {
			return board.Invalid("a started run is running or queued, not %q", req.Status)
		}
		return firstErr(optionalName("card id", req.Card), optionalName("run id", req.RunID), board.ValidateCheckpoint(req.Checkpoint))
	case *apitype.FinishRequest:
		switch req.Status {
		case board.RunFinished, board.RunFailed, board.RunFailedResumable:
		default:
			return board.Invalid("a verdict is finished, failed or failed_resumable, not %q", req.Status)
		}
		var cp error
		if req.Checkpoint != nil {
			cp = board.ValidateCheckpoint(*req.Checkpoint)
		}
		var retry error
		if req.Retryable && req.Status != board.RunFailed {
			retry = board.Invalid("only a failed verdict is retryable, not %s", req.Status)
		}
		return firstErr(board.ValidateName("run id", req.RunID), board.ValidateText("failure code", req.FailureCode), cp, retry)
	case *apitype.UpdateRunRequest:
		return board.UpdateRunParams{
			ID: r.PathValue("id"), IfStatus: req.IfStatus, Status: req.Status, Continuation: req.Continuation,
			FailureCode: req.FailureCode, Checkpoint: req.Checkpoint,
		}.ValidateChange()
	case *apitype.CreateCardRequest:
		nc := *req
		nc.Actor = "" // the handler sets it from the kernel; the body's is not used
		_, err := nc.Normalize()
		return firstErr(err, optionalName("state", req.State))
	case *apitype.MoveRequest:
		return firstErr(board.ValidateName("state", req.To), board.ValidateText("reason", string(req.Reason)))
	case *apitype.AdjustLabelsRequest:
		return board.AdjustLabelsParams{Card: r.PathValue("id"), Add: req.Add, Remove: req.Remove}.Validate()
	case *apitype.SetLabelsRequest:
		_, err := board.NormalizeLabels(req.Labels)
		return err
	case *apitype.RenameRequest:
		// A state or a label: both are names (a label's own rules, which
		// boardadmin applies, are narrower still).
		return firstErr(board.ValidateName("name", req.From), board.ValidateName("new name", req.To))
	case *apitype.DeleteStateRequest:
		return firstErr(board.ValidateName("state", req.State), board.ValidateName("target state", req.Into))
	case *apitype.MergeLabelsRequest:
		return firstErr(checkNames("label", req.From), board.ValidateName("target label", req.Into))
	case *apitype.DeleteLabelRequest:
		return board.ValidateName("label", req.Label)
	case *apitype.PruneRequest:
		if req.OlderThanMS < 0 {
			return board.Invalid("older_than_ms %d is negative", req.OlderThanMS)
		}
		if req.Limit < 0 || req.Limit > board.MaxPruneLimit {
			return board.Invalid("limit %d out of range 0..%d", req.Limit, board.MaxPruneLimit)
		}
		return nil
	case *struct{}:
		return nil
	}
	// Every request type is listed above; a new one must be too.
	return fmt.Errorf("%w: socketapi: no input rules for %T", apitype.ErrInternal, v)
}
