package main

import (
	"errors"
	"fmt"
)

// Exit codes of every leasekeeper command but claim, whose command's own
// status passes through (claim.go has its codes).
const (
	exitOK = 0
	// exitError: the command failed (agent unreachable, refused, store error).
	exitError = 1
	// exitUsage: bad flags or arguments.
	exitUsage = 2
)

const exitCodesHelp = `Exit codes:
  0  success
  1  error (agent unreachable, request refused, store failure)
  2  usage error
  (claim and card wait have codes of their own: see their --help)`

// exitError carries an exit code through cobra's error return.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// withCode attaches an exit code to err.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codeError{code: code, err: err}
}

// usageError is a bad invocation: exit 2 with a hint to --help.
func usageError(format string, args ...any) error {
	return withCode(exitUsage, fmt.Errorf(format, args...))
}

// exitCodeOf maps a command error to the process exit code.
func exitCodeOf(err error) int {
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}
