package kv

import (
	"path/filepath"
	"testing"

	"github.com/augur-log/augur/target"
)

// TestApplyPersists: a batch's mutations, its history and its last index
// survive closing and reopening the file; an empty payload deletes.
func TestApplyPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.db")
	s, err := Open(path, Options{History: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := s.Apply(ctx, target.Batch{Entries: []target.Entry{
		{Index: 3, Key: "a", Payload: []byte("1")}, {Index: 5, Key: "b", Payload: []byte("2")},
	}, Last: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, target.Batch{Entries: []target.Entry{{Index: 8, Key: "a"}}, Last: 9}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path, Options{History: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, err := s.LastApplied(ctx); err != nil || last != 9 {
		t.Fatalf("last applied %d, %v; want 9", last, err)
	}
	if _, ok, _ := s.Get("a"); ok {
		t.Fatal("a still set after its delete")
	}
	if v, ok, _ := s.Get("b"); !ok || string(v) != "2" {
		t.Fatalf("b = %q, %v; want 2", v, ok)
	}
	h, err := s.History()
	if err != nil {
		t.Fatal(err)
	}
	want := []Applied{{3, "a"}, {5, "b"}, {8, "a"}}
	if len(h) != len(want) {
		t.Fatalf("history %v, want %v", h, want)
	}
	for i := range want {
		if h[i] != want[i] {
			t.Fatalf("history %v, want %v", h, want)
		}
	}
	// The store itself does not refuse a duplicate (the SDK does); the
	// history must show one, since it is what checkers look for.
	if err := s.Apply(ctx, target.Batch{Entries: []target.Entry{{Index: 8, Key: "a"}}, Last: 9}); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.History(); len(h) != 4 || h[3] != (Applied{8, "a"}) {
		t.Fatalf("history after a duplicate: %v", h)
	}
}
