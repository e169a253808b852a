package mongostore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/store/mongo/connstr"
)

// Open never returns an error carrying the connection string's secrets,
// whichever step fails, and the error still unwraps to its cause.
func TestOpenErrorsCarryNoSecret(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, uri := range []string{
		// Nothing listens there: the ping fails after server selection.
		"mongodb://alice:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=200&connectTimeoutMS=200",
		// The driver refuses the string itself.
		"mongodb://alice:s3cret@127.0.0.1:1/?serverSelectionTimeoutMS=notanumber",
	} {
		_, err := Open(ctx, Options{URI: uri, Database: "lk"})
		if err == nil {
			t.Fatalf("Open(%s) succeeded", connstr.Redact(uri))
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open error carries the password: %v", err)
		}
	}
	cause := errors.New("bad: mongodb://u:s3cret@h")
	if err := scrub(cause, "mongodb://u:s3cret@h"); !errors.Is(err, cause) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("scrub = %v (is cause: %v), want the secret out and the cause kept", err, errors.Is(err, cause))
	}
}
