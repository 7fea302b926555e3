package postgres

import (
	"slices"
	"testing"

	"github.com/augur-log/augur/internal/pgtest"
	"github.com/augur-log/augur/target"
)

// TestApplyPersists runs against a real PostgreSQL server: a batch's
// mutations, its history and its last index are there after reconnecting,
// an empty payload deletes, and two stores on different tables of one
// database keep apart.
func TestApplyPersists(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx := t.Context()
	s, err := Open(ctx, dsn, Options{History: true})
	if err != nil {
		t.Fatal(err)
	}
	if last, err := s.LastApplied(ctx); err != nil || last != 0 {
		t.Fatalf("fresh store: last applied %d, %v", last, err)
	}
	if err := s.Apply(ctx, target.Batch{Entries: []target.Entry{
		{Index: 3, Key: "a", Payload: []byte("1")}, {Index: 5, Key: "b", Payload: []byte("2")},
	}, Last: 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, target.Batch{Entries: []target.Entry{{Index: 8, Key: "a"}}, Last: 9}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(ctx, dsn, Options{History: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if last, err := s.LastApplied(ctx); err != nil || last != 9 {
		t.Fatalf("last applied %d, %v; want 9", last, err)
	}
	if _, ok, err := s.Get(ctx, "a"); ok || err != nil {
		t.Fatalf("a still set after its delete (%v)", err)
	}
	if v, ok, _ := s.Get(ctx, "b"); !ok || string(v) != "2" {
		t.Fatalf("b = %q, %v; want 2", v, ok)
	}
	h, err := s.History(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Applied{{3, "a"}, {5, "b"}, {8, "a"}}; !slices.Equal(h, want) {
		t.Fatalf("history %v, want %v", h, want)
	}

	other, err := Open(ctx, dsn, Options{Table: "other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if last, _ := other.LastApplied(ctx); last != 0 {
		t.Fatalf("a second table starts at %d, not 0", last)
	}
}

// TestApplyAtomic: a batch that fails part way applies nothing, not even
// its index.
func TestApplyAtomic(t *testing.T) {
	dsn := pgtest.Start(t)
	ctx := t.Context()
	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A key with a NUL byte is not valid text in PostgreSQL: the batch
	// fails at its second statement.
	err = s.Apply(ctx, target.Batch{Entries: []target.Entry{
		{Index: 1, Key: "ok", Payload: []byte("x")}, {Index: 2, Key: "bad\x00", Payload: []byte("y")},
	}, Last: 2})
	if err == nil {
		t.Fatal("a batch with an invalid key was applied")
	}
	if last, _ := s.LastApplied(ctx); last != 0 {
		t.Fatalf("last applied %d after a failed batch, want 0", last)
	}
	if _, ok, _ := s.Get(ctx, "ok"); ok {
		t.Fatal("the failed batch's first entry was applied")
	}
}
