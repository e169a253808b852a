package apitype

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/leasekeeper/leasekeeper/board"
)

// Errors of the socket itself, beside the board sentinels. The server wraps
// them with %w; the client turns an error body back into them, so
// errors.Is works on both sides of the socket: an error keeps its identity
// across every process boundary, the socket as the plugin boundary
// (DESIGN.md#plugin-errors), and callers test it with errors.Is, never by
// its message.
var (
	// ErrForbidden: the caller is identified but may not do this (not the
	// claim's owner, a reused pid, not an operator uid, a browser request).
	ErrForbidden = errors.New("forbidden")
	// ErrUnauthorized: the agent cannot tell who the caller is (a peer in a
	// foreign pid namespace with no usable identity).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrBadRequest: the request is malformed (bad JSON, unknown field,
	// trailing data, unknown route, wrong method).
	ErrBadRequest = errors.New("bad request")
	// ErrTooLarge: the request body is over the size cap.
	ErrTooLarge = errors.New("request too large")
	// ErrUnavailable: the agent cannot serve this now (shutting down, store
	// unreachable).
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal: an unexpected failure inside the agent.
	ErrInternal = errors.New("internal error")
)

// Code is the machine-readable error class of an error body. Codes map one
// to one to sentinel errors.
type Code string

const (
	CodeNotFound           Code = "not_found"
	CodeClaimConflict      Code = "claim_conflict"
	CodeTransitionRejected Code = "transition_rejected"
	CodeTerminalStateExit  Code = "terminal_state_exit"
	CodeWaitingOnBlockers  Code = "waiting_on_blockers"
	CodeEventsPruned       Code = "events_pruned"
	CodeInvalidArgument    Code = "invalid_argument"
	CodeAlreadyExists      Code = "already_exists"
	CodeOutcomeUnknown     Code = "outcome_unknown"
	CodeForbidden          Code = "forbidden"
	CodeUnauthorized       Code = "unauthorized"
	CodeBadRequest         Code = "bad_request"
	CodeTooLarge           Code = "too_large"
	CodeUnavailable        Code = "unavailable"
	CodeInternal           Code = "internal"
)

// codeTable is ordered most specific first: ErrTerminalStateExit and
// ErrWaitingOnBlockers wrap ErrTransitionRejected, ErrAlreadyExists
// wraps ErrInvalidArgument and ErrEventsPruned wraps ErrNotFound, so the wrapper must be matched before what it
// wraps.
var codeTable = []struct {
	code   Code
	err    error
	status int
}{
	{CodeClaimConflict, board.ErrClaimConflict, http.StatusConflict},
	{CodeTerminalStateExit, board.ErrTerminalStateExit, http.StatusConflict},
	{CodeWaitingOnBlockers, board.ErrWaitingOnBlockers, http.StatusConflict},
	{CodeTransitionRejected, board.ErrTransitionRejected, http.StatusConflict},
	{CodeAlreadyExists, board.ErrAlreadyExists, http.StatusConflict},
	{CodeInvalidArgument, board.ErrInvalidArgument, http.StatusBadRequest},
	{CodeEventsPruned, board.ErrEventsPruned, http.StatusGone},
	{CodeNotFound, board.ErrNotFound, http.StatusNotFound},
	{CodeOutcomeUnknown, board.ErrOutcomeUnknown, http.StatusBadGateway},
	{CodeForbidden, ErrForbidden, http.StatusForbidden},
	{CodeUnauthorized, ErrUnauthorized, http.StatusUnauthorized},
	{CodeBadRequest, ErrBadRequest, http.StatusBadRequest},
	{CodeTooLarge, ErrTooLarge, http.StatusRequestEntityTooLarge},
	{CodeUnavailable, ErrUnavailable, http.StatusServiceUnavailable},
	{CodeInternal, ErrInternal, http.StatusInternalServerError},
}

// Codes lists every error code.
func Codes() []Code {
	out := make([]Code, len(codeTable))
	for i, row := range codeTable {
		out[i] = row.code
	}
	return out
}

// ErrorBody is the JSON body of every error response:
// {"error": "...", "code": "..."}. A claim_conflict also names the card, the
// current holder and epoch.
type ErrorBody struct {
	Error  string `json:"error"`
	Code   Code   `json:"code"`
	Card   string `json:"card,omitempty"`
	Holder string `json:"holder,omitempty"`
	Epoch  int64  `json:"epoch,omitempty"`
}

// ErrorFor classifies err into the status and body the server sends.
// Unclassified errors are internal.
func ErrorFor(err error) (int, ErrorBody) {
	body := ErrorBody{Error: err.Error(), Code: CodeInternal}
	status := http.StatusInternalServerError
	for _, row := range codeTable {
		if errors.Is(err, row.err) {
			body.Code, status = row.code, row.status
			break
		}
	}
	if ce, ok := board.AsClaimConflict(err); ok {
		body.Card, body.Holder, body.Epoch = ce.Card, ce.Holder, ce.Epoch
	}
	return status, body
}

// StatusOf is the HTTP status a code is sent with.
func StatusOf(c Code) int {
	for _, row := range codeTable {
		if row.code == c {
			return row.status
		}
	}
	return http.StatusInternalServerError
}

// Sentinel is the sentinel error a code stands for (nil for an unknown code).
func Sentinel(c Code) error {
	for _, row := range codeTable {
		if row.code == c {
			return row.err
		}
	}
	return nil
}

// Error is an error response turned back into a Go error. It unwraps to the
// code's sentinel, or to a *board.ClaimConflictError for a claim_conflict, so
// errors.Is(err, board.ErrClaimConflict) and board.AsClaimConflict work.
type Error struct {
	Status int
	Body   ErrorBody
}

func (e *Error) Error() string {
	return fmt.Sprintf("agent: %s (%s, HTTP %d)", e.Body.Error, e.Body.Code, e.Status)
}

// Unwrap returns the sentinel (or the conflict details) behind the code.
func (e *Error) Unwrap() error {
	if e.Body.Code == CodeClaimConflict {
		return &board.ClaimConflictError{Card: e.Body.Card, Holder: e.Body.Holder, Epoch: e.Body.Epoch}
	}
	if s := Sentinel(e.Body.Code); s != nil {
		return s
	}
	// An unknown code (a newer agent) still classifies by status.
	switch {
	case e.Status == http.StatusNotFound:
		return board.ErrNotFound
	case e.Status == http.StatusForbidden:
		return ErrForbidden
	case e.Status >= 500:
		return ErrInternal
	default:
		return ErrBadRequest
	}
}
