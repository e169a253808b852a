package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
)

// A file that exists is never opened as a new board: an empty, truncated
// or damaged one refuses to open with one error naming it and what to do,
// and the file is left as found — never a panic, never fresh epochs.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	const pageSize = 4096
	// pageFlags reads the flags of page i of a bbolt file.
	pageFlags := func(b []byte, i int) uint16 { return binary.LittleEndian.Uint16(b[i*pageSize+8:]) }
	const leafPage, freelistPage = 0x02, 0x10
	tests := []struct {
		name   string
		damage func(t *testing.T, b []byte) []byte
	}{
		{"empty", func(t *testing.T, b []byte) []byte { return nil }},
		{"truncated to half", func(t *testing.T, b []byte) []byte { return b[:len(b)/2] }},
		{"leaf page headers flipped", func(t *testing.T, b []byte) []byte {
			n := 0
			for i := 2; i < len(b)/pageSize; i++ {
				if pageFlags(b, i) == leafPage {
					// The element count: the page's first element then
					// points past its end.
					binary.LittleEndian.PutUint16(b[i*pageSize+10:], 0xffff)
					n++
				}
			}
			if n == 0 {
				t.Fatal("no leaf page found")
			}
			return b
		}},
		{"freelist zeroed", func(t *testing.T, b []byte) []byte {
			n := 0
			for i := 2; i < len(b)/pageSize; i++ {
				if pageFlags(b, i) == freelistPage {
					clear(b[i*pageSize : (i+1)*pageSize])
					n++
				}
			}
			if n == 0 {
				t.Fatal("no freelist page found")
			}
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "board.db")
			s, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				id := fmt.Sprintf("card-%03d", i)
				if _, err := s.CreateCard(t.Context(), board.CreateCardParams{ID: id, Title: strings.Repeat("x", 100)}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Claim(t.Context(), board.ClaimParams{Card: id, Marker: "host-42", Lease: 30e9}); err != nil {
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
			damaged := tt.damage(t, bytes.Clone(b))
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}

			_, err = Open(path, Options{})
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("Open of a damaged file = %v, want ErrDamaged", err)
			}
			if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "restore") || strings.Count(msg, "\n") > 0 {
				t.Errorf("error %q: want one line naming the file and what to do", msg)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, damaged) {
				t.Error("the refused open changed the file")
			}
		})
	}
}

// BenchmarkOpenCheck measures Open of a 10,000-card file, consistency
// check included.
func BenchmarkOpenCheck(b *testing.B) {
	path := filepath.Join(b.TempDir(), "board.db")
	s, err := Open(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		id := fmt.Sprintf("card-%05d", i)
		if _, err := s.CreateCard(b.Context(), board.CreateCardParams{ID: id}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Claim(b.Context(), board.ClaimParams{Card: id, Marker: "host-42", Lease: 30e9}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Close()
	}
}
