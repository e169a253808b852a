package plugins

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestPluginSideDeadlineIsTheCallers: the plugin runs a call under its own
// copy of the caller's deadline, which may fire just before the caller's.
// The cancellation it sends back is the caller's deadline passing, not a
// broken plugin: reported as DeadlineExceeded, and not a reason to replace
// the plugin. A cancellation with no deadline near stays a call failure.
func TestPluginSideDeadlineIsTheCallers(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.Canceled, codes.DeadlineExceeded} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		err := callError(ctx, "GetCard", status.Error(code, "stream terminated by RST_STREAM with error code: CANCEL"))
		cancel()
		var cf *callFailure
		if !errors.As(err, &cf) || !cf.byCaller {
			t.Errorf("%v near the deadline: %v, want a failure the caller caused", code, err)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, board.ErrOutcomeUnknown) {
			t.Errorf("%v near the deadline: %v, want DeadlineExceeded and ErrOutcomeUnknown", code, err)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	err := callError(ctx, "GetCard", status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"))
	var cf *callFailure
	if !errors.As(err, &cf) || cf.byCaller || !errors.Is(err, board.ErrOutcomeUnknown) {
		t.Errorf("a cancellation an hour before the deadline: %v, want a plugin failure with outcome unknown", err)
	}
}
