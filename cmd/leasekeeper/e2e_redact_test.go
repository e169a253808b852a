package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/agentproc"
)

// TestE2ECredentialsNeverReachTheLog: an agent whose MongoDB URI carries a
// password, retrying a server that refuses connections, logs every attempt
// with the password (and secret options) redacted.
func TestE2ECredentialsNeverReachTheLog(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every attempt is refused
	e := newEnv(t, "")
	uri := "mongodb://alice:s3cret@" + addr + "/?directConnection=true&serverSelectionTimeoutMS=300&connectTimeoutMS=300&tlsCertificateKeyFilePassword=k3yfile"
	cfg := "socket: " + e.Socket + "\nstore: {backend: mongo, uri: \"" + uri + "\", database: lk}\n"
	if err := os.WriteFile(e.Config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs, _ := e.startUnready()
	agentproc.WaitFor(t, 60*time.Second, "two logged attempts to reach the store", func() bool {
		return strings.Count(logs.String(), "store unreachable") >= 2
	})
	out := logs.String()
	for _, secret := range []string{"s3cret", "k3yfile"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log carries %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "alice:xxxxx@") {
		t.Errorf("the log does not name the redacted URI:\n%s", out)
	}
}
