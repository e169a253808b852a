package boltstore

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// TestOpenAcceptsAFileWithItsOlderMetaDamaged: bbolt keeps two meta pages
// and reads the valid one with the higher txid, so a file whose older meta
// page fails its checksum (here a flipped bit in its page size) is a good
// board, and bbolt opens it, its page size read from the other meta. The page walk must read the
// file as bbolt does and not call it damaged (DESIGN.md#board-damage).
func TestOpenAcceptsAFileWithItsOlderMetaDamaged(t *testing.T) {
	const pageSize = 4096
	path := filepath.Join(t.TempDir(), "board.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: fmt.Sprintf("card-%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	txid := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*pageSize+16+48:]) }
	older := 0
	if txid(1) < txid(0) {
		older = 1
	}
	// A flipped bit in its page size: its checksum no longer matches.
	b[older*pageSize+16+8+1] ^= 0x40
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open of a file whose older meta page (%d) is damaged: %v", older, err)
	}
	defer s.Close()
	cs, err := s.ListCards(t.Context(), board.ListCardsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != n {
		t.Errorf("listed %d cards, want %d", len(cs), n)
	}
}
