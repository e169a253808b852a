// Package connstr redacts MongoDB connection strings for logs, status
// output and errors. It depends on nothing but the standard library, so the
// packages that describe a store (storespec) can print one without linking
// the MongoDB driver.
package connstr

import (
	"net/url"
	"strings"
)

// Placeholder stands in for a secret in anything that is printed.
const Placeholder = "xxxxx"

// secretOptions are connection-string options whose values are secrets
// (compared case-insensitively, as the driver reads them).
var secretOptions = map[string]bool{
	"password":                        true,
	"tlscertificatekeyfilepassword":   true,
	"sslclientcertificatekeypassword": true,
	// It carries AWS_SESSION_TOKEN and similar for some mechanisms.
	"authmechanismproperties": true,
}

// Redact returns a MongoDB connection string fit for a log line, a
// status field or an error: the password of its user info and the values
// of secret options are replaced by "xxxxx"; everything else (hosts,
// database, the other options) stays, so the line still says where the
// agent is connecting. It works on the text, not on a parsed URL, so a
// seed list ("h1,h2:27018") or a string the driver would refuse is
// redacted all the same.
func Redact(uri string) string {
	out, _ := Secrets(uri)
	return out
}

// Secrets is Redact that also returns the secrets it took out, in the
// forms they may appear in an error (as written and percent-decoded), so
// a caller can scrub them from a message that quotes them.
func Secrets(uri string) (string, []string) {
	var secrets []string
	add := func(s string) {
		if s == "" {
			return
		}
		secrets = append(secrets, s)
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			secrets = append(secrets, d)
		}
	}
	rest, scheme := uri, ""
	if i := strings.Index(rest, "://"); i >= 0 {
		scheme, rest = rest[:i+3], rest[i+3:]
	}
	// The user info ends at the last '@' before the path or the options —
	// but a password written unescaped may itself hold a '/' or '?', so the
	// authority is taken to end at the first '/' or '?' after the FIRST
	// '@': the userinfo then reaches the last '@' before that. (Erring this
	// way can only hide more of a string that has an '@' in its options.)
	authority, tail := rest, ""
	from := strings.Index(rest, "@") + 1 // 0 when there is no '@'
	if i := strings.IndexAny(rest[from:], "/?"); i >= 0 {
		authority, tail = rest[:from+i], rest[from+i:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user := authority[:at]
		if c := strings.Index(user, ":"); c >= 0 {
			add(user[c+1:])
			user = user[:c] + ":" + Placeholder
		}
		authority = user + authority[at:]
	}
	if q := strings.Index(tail, "?"); q >= 0 {
		opts := strings.Split(tail[q+1:], "&")
		for i, kv := range opts {
			k, v, ok := strings.Cut(kv, "=")
			if ok && secretOptions[strings.ToLower(k)] {
				add(v)
				opts[i] = k + "=" + Placeholder
			}
		}
		tail = tail[:q+1] + strings.Join(opts, "&")
	}
	return scheme + authority + tail, secrets
}
