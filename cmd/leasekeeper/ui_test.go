package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUIOpenKeepsTheTokenOutOfArgv: what --open runs names a file, never
// the URL; the file, readable by this user only, leads to the URL.
func TestUIOpenKeepsTheTokenOutOfArgv(t *testing.T) {
	const token = "s3cr3t-T0ken_value"
	url := "http://127.0.0.1:41234/?token=" + token
	argv, cleanup, err := openerArgv(url)
	if err != nil {
		t.Fatal(err)
	}
	if len(argv) != 2 || argv[0] != "xdg-open" {
		t.Fatalf("argv = %q, want xdg-open and one file path", argv)
	}
	for _, a := range argv {
		if strings.Contains(a, token) || strings.Contains(a, "127.0.0.1") {
			t.Errorf("argv %q carries the URL or its token", argv)
		}
	}
	name := argv[1]
	if !filepath.IsAbs(name) {
		t.Errorf("the opened path %q is not absolute", name)
	}
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode(); !m.IsRegular() || m.Perm() != 0o600 {
		t.Errorf("the page's mode is %v, want a regular file of mode 0600", m)
	}
	di, err := os.Stat(filepath.Dir(name))
	if err != nil {
		t.Fatal(err)
	}
	if m := di.Mode(); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("its directory's mode is %v, want a directory of mode 0700", m)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `http-equiv="refresh" content="0;url=`+url+`"`) {
		t.Errorf("the page does not redirect to the URL:\n%s", b)
	}
	if strings.Contains(string(b), "<script") || strings.Count(string(b), url) != 1 {
		t.Errorf("the page leads to the URL more than once (a second request for the token is refused):\n%s", b)
	}

	cleanup()
	if _, err := os.Stat(filepath.Dir(name)); !os.IsNotExist(err) {
		t.Errorf("after cleanup the directory is still there: %v", err)
	}
}
