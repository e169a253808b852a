//go:build !unix

package filelock

import (
	"errors"
	"fmt"
)

// Lock is unavailable where flock is: it returns an error wrapping
// errors.ErrUnsupported, and the caller decides what to do without it.
func Lock(string) (unlock func(), err error) {
	return nil, fmt.Errorf("file locks: %w", errors.ErrUnsupported)
}
