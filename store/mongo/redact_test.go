package mongostore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRedactURI(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"mongodb://alice:s3cret@db:27017/?replicaSet=rs0", "mongodb://alice:xxxxx@db:27017/?replicaSet=rs0"},
		{"mongodb://alice:p%40ss@h1,h2:27018/lk", "mongodb://alice:xxxxx@h1,h2:27018/lk"},
		{"mongodb+srv://bob:pw@cluster.example/?authSource=admin&tlsCertificateKeyFilePassword=k3y",
			"mongodb+srv://bob:xxxxx@cluster.example/?authSource=admin&tlsCertificateKeyFilePassword=xxxxx"},
		{"mongodb://db/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t0k", "mongodb://db/?authMechanism=MONGODB-AWS&authMechanismProperties=xxxxx"},
		{"mongodb://carol@db", "mongodb://carol@db"},
		{"mongodb://db:27017", "mongodb://db:27017"},
		{"not a uri:secret@x", "not a uri:xxxxx@x"},
		// A password written unescaped, holding the characters that end an
		// authority, or an '@'.
		{"mongodb://alice:pa/ss@db/lk", "mongodb://alice:xxxxx@db/lk"},
		{"mongodb://alice:pa?ss@db/?w=1", "mongodb://alice:xxxxx@db/?w=1"},
		{"mongodb://alice:p@ss@db", "mongodb://alice:xxxxx@db"},
	}
	for _, tc := range tests {
		if got := RedactURI(tc.in); got != tc.want {
			t.Errorf("RedactURI(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

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
			t.Fatalf("Open(%s) succeeded", RedactURI(uri))
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
