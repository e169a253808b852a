package apitype_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/leasekeeper/leasekeeper/apitype"
	"github.com/leasekeeper/leasekeeper/board"
)

// TestErrorRoundTrip: an error classified by the server and rebuilt by the
// client from its body still matches the same sentinels.
func TestErrorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		wantCode apitype.Code
		wantIs   []error
	}{
		{"not found", board.NotFound("card", "x"), apitype.CodeNotFound, []error{board.ErrNotFound}},
		{"conflict", fmt.Errorf("wrapped: %w", board.Conflict("c", "h-2", 7)), apitype.CodeClaimConflict, []error{board.ErrClaimConflict}},
		{"terminal exit", board.ErrTerminalStateExit, apitype.CodeTerminalStateExit, []error{board.ErrTerminalStateExit, board.ErrTransitionRejected}},
		{"waiting on blockers", fmt.Errorf("card %q: %w", "d", board.ErrWaitingOnBlockers), apitype.CodeWaitingOnBlockers, []error{board.ErrWaitingOnBlockers, board.ErrTransitionRejected}},
		{"transition", board.ErrTransitionRejected, apitype.CodeTransitionRejected, []error{board.ErrTransitionRejected}},
		{"already exists", board.ErrAlreadyExists, apitype.CodeAlreadyExists, []error{board.ErrAlreadyExists, board.ErrInvalidArgument}},
		{"invalid", board.Invalid("bad %s", "x"), apitype.CodeInvalidArgument, []error{board.ErrInvalidArgument}},
		{"outcome unknown", board.ErrOutcomeUnknown, apitype.CodeOutcomeUnknown, []error{board.ErrOutcomeUnknown}},
		{"forbidden", apitype.ErrForbidden, apitype.CodeForbidden, []error{apitype.ErrForbidden}},
		{"unauthorized", apitype.ErrUnauthorized, apitype.CodeUnauthorized, []error{apitype.ErrUnauthorized}},
		{"bad request", apitype.ErrBadRequest, apitype.CodeBadRequest, []error{apitype.ErrBadRequest}},
		{"too large", apitype.ErrTooLarge, apitype.CodeTooLarge, []error{apitype.ErrTooLarge}},
		{"unavailable", apitype.ErrUnavailable, apitype.CodeUnavailable, []error{apitype.ErrUnavailable}},
		{"unclassified", errors.New("boom"), apitype.CodeInternal, []error{apitype.ErrInternal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := apitype.ErrorFor(tc.err)
			if body.Code != tc.wantCode || status != apitype.StatusOf(tc.wantCode) {
				t.Fatalf("ErrorFor = %d %q, want %d %q", status, body.Code, apitype.StatusOf(tc.wantCode), tc.wantCode)
			}
			back := &apitype.Error{Status: status, Body: body}
			for _, want := range tc.wantIs {
				if !errors.Is(back, want) {
					t.Errorf("rebuilt error %v is not %v", back, want)
				}
			}
		})
	}
	_, body := apitype.ErrorFor(board.Conflict("c", "h-2", 7))
	ce, ok := board.AsClaimConflict(&apitype.Error{Status: 409, Body: body})
	if !ok || ce.Card != "c" || ce.Holder != "h-2" || ce.Epoch != 7 {
		t.Errorf("AsClaimConflict after the round trip = %+v, %v; want c held by h-2 at 7", ce, ok)
	}
}

func TestEveryCodeHasASentinel(t *testing.T) {
	t.Parallel()
	for _, c := range apitype.Codes() {
		if apitype.Sentinel(c) == nil {
			t.Errorf("code %q has no sentinel", c)
		}
	}
}
