package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

func TestStoreDiscardWALAsksForConfirmationThenMovesTheLogAside(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "board.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: "kept"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		root := newRoot(&cli{})
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}

	_, err = run("store", "discard-wal", path)
	var ce *codeError
	if !errors.As(err, &ce) || ce.code != exitUsage || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("without --yes: %v, want a usage error asking for --yes", err)
	}
	if _, err := os.Stat(path + boltstore.WALSuffix); err != nil {
		t.Fatalf("the log was touched without --yes: %v", err)
	}

	out, err := run("store", "discard-wal", path, "--yes")
	if err != nil {
		t.Fatalf("with --yes: %v", err)
	}
	if !strings.Contains(out, "moved the write-ahead log aside to "+path+boltstore.WALSuffix+".discarded-") {
		t.Errorf("output %q does not say where the log went", out)
	}
	s, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("Open after discard-wal: %v", err)
	}
	defer s.Close()
	if _, err := s.GetCard(t.Context(), board.GetCardParams{ID: "kept"}); err != nil {
		t.Errorf("a card the file held: %v", err)
	}
}
