package client_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/leasekeeper/leasekeeper/board"
	"github.com/leasekeeper/leasekeeper/client"
	"github.com/leasekeeper/leasekeeper/socketapi/socketapitest"
	boltstore "github.com/leasekeeper/leasekeeper/store/bolt"
)

func TestBoardIsTheStoresBoard(t *testing.T) {
	t.Parallel()
	custom := board.Board{States: []board.State{
		{Name: "todo", Pool: true, Launch: true},
		{Name: "doing", Running: true},
		{Name: "shipped", Terminal: true, Completion: true},
		{Name: board.StateFailed, Terminal: true},
	}}
	tests := []struct {
		name string
		b    board.Board
	}{
		{"local default", board.DefaultBoard(true)},
		{"fleet default", board.DefaultBoard(false)},
		{"custom names", custom},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := boltstore.Open(filepath.Join(t.TempDir(), "board.db"), boltstore.Options{Board: tc.b})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			a := socketapitest.Start(t, socketapitest.Options{Store: st})
			c := &client.Client{Socket: a.Path}
			got, err := c.Board(testCtx(t))
			if err != nil {
				t.Fatalf("Board: %v", err)
			}
			if !slices.Equal(got.States, tc.b.States) {
				t.Errorf("board = %v, want %v", got, tc.b)
			}
			if got, want := got.Running(), tc.b.Running(); got != want {
				t.Errorf("running column = %q, want %q", got, want)
			}
		})
	}
}
