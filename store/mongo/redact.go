package mongostore

import (
	"strings"

	"github.com/leasekeeper/leasekeeper/store/mongo/connstr"
)

// redactedError is an error whose text had a connection string's secrets
// taken out. It still unwraps to the original, so errors.Is keeps working.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// scrub returns err with every secret of uri taken out of its text (the
// driver quotes the connection string in some of its errors).
func scrub(err error, uri string) error {
	if err == nil {
		return nil
	}
	clean, secrets := connstr.Secrets(uri)
	msg := strings.ReplaceAll(err.Error(), uri, clean)
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, connstr.Placeholder)
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}
