// Package cut holds the arithmetic of global cuts: how a cut vector turns the
// shards' local records into global positions. It is pure: no I/O, clocks or
// goroutines.
//
// A cut says, for each shard, how many of its records are ordered so far.
// Records added between two consecutive cuts are ordered by ascending shard
// id, then by each shard's local order, so every server that sees the same
// cuts assigns the same positions.
package cut

import (
	"fmt"
	"slices"
)

// ShardID names a shard; ids are never reused.
type ShardID = uint32

// Length is one entry of a cut vector.
type Length struct {
	Shard  ShardID
	Length uint64
}

// Cut is a committed global cut. Index counts cuts from 1; the zero Cut is the
// empty log before the first cut. Positions [Start, End) are the records it
// adds. Lengths is sorted by shard id and never shrinks from one cut to the
// next.
type Cut struct {
	Index   uint64
	Start   uint64
	End     uint64
	Lengths []Length
}

// Len is how many of shard's records the cut orders (0 if absent).
func (c Cut) Len(shard ShardID) uint64 {
	i, ok := slices.BinarySearchFunc(c.Lengths, shard, func(l Length, s ShardID) int {
		return int(int64(l.Shard) - int64(s))
	})
	if !ok {
		return 0
	}
	return c.Lengths[i].Length
}

// Total is the number of records ordered up to and including c.
func (c Cut) Total() uint64 {
	var n uint64
	for _, l := range c.Lengths {
		n += l.Length
	}
	return n
}

// Slice is the part of one cut that belongs to one shard: its local records
// [LocalStart, LocalStart+Count) take positions [GlobalStart, GlobalStart+Count).
type Slice struct {
	Shard       ShardID
	LocalStart  uint64
	GlobalStart uint64
	Count       uint64
}

// Interleave returns the slices that cur adds after prev, in position order,
// omitting shards that add nothing. It checks that cur extends prev.
func Interleave(prev, cur Cut) ([]Slice, error) {
	if err := CheckSuccessor(prev, cur); err != nil {
		return nil, err
	}
	var out []Slice
	pos := cur.Start
	for _, l := range cur.Lengths {
		before := prev.Len(l.Shard)
		if l.Length == before {
			continue
		}
		out = append(out, Slice{Shard: l.Shard, LocalStart: before, GlobalStart: pos, Count: l.Length - before})
		pos += l.Length - before
	}
	return out, nil
}

// SliceOf is the slice shard owns in cur, with Count 0 if it adds nothing.
func SliceOf(prev, cur Cut, shard ShardID) Slice {
	pos := cur.Start
	for _, l := range cur.Lengths {
		before := prev.Len(l.Shard)
		if l.Shard == shard {
			return Slice{Shard: shard, LocalStart: before, GlobalStart: pos, Count: l.Length - before}
		}
		pos += l.Length - before
	}
	return Slice{Shard: shard, LocalStart: prev.Len(shard), GlobalStart: pos}
}

// CheckSuccessor reports whether cur may directly follow prev: next index,
// contiguous positions, sorted lengths, no shard shrinking or vanishing.
func CheckSuccessor(prev, cur Cut) error {
	if cur.Index != prev.Index+1 {
		return fmt.Errorf("cut %d does not follow cut %d", cur.Index, prev.Index)
	}
	if cur.Start != prev.End {
		return fmt.Errorf("cut %d starts at %d, previous ends at %d", cur.Index, cur.Start, prev.End)
	}
	var added uint64
	for i, l := range cur.Lengths {
		if i > 0 && cur.Lengths[i-1].Shard >= l.Shard {
			return fmt.Errorf("cut %d: lengths not sorted by shard", cur.Index)
		}
		before := prev.Len(l.Shard)
		if l.Length < before {
			return fmt.Errorf("cut %d: shard %d shrinks from %d to %d", cur.Index, l.Shard, before, l.Length)
		}
		added += l.Length - before
	}
	for _, l := range prev.Lengths {
		if _, ok := slices.BinarySearchFunc(cur.Lengths, l.Shard, func(x Length, s ShardID) int {
			return int(int64(x.Shard) - int64(s))
		}); !ok {
			return fmt.Errorf("cut %d: shard %d vanished", cur.Index, l.Shard)
		}
	}
	if cur.End-cur.Start != added {
		return fmt.Errorf("cut %d spans %d positions but adds %d records", cur.Index, cur.End-cur.Start, added)
	}
	return nil
}

// Next builds the cut after prev from proposed lengths. Proposed lengths
// merge by maximum with prev (a stale proposal cannot shrink a cut) and are
// capped by limit (a finalized shard's final length); shards absent from
// proposed keep their length. ok is false when nothing grew.
func Next(prev Cut, proposed []Length, limit func(ShardID) (uint64, bool)) (next Cut, ok bool) {
	merged := slices.Clone(prev.Lengths)
	for _, p := range proposed {
		want := p.Length
		if max, capped := limit(p.Shard); capped && want > max {
			want = max
		}
		i, found := slices.BinarySearchFunc(merged, p.Shard, func(l Length, s ShardID) int {
			return int(int64(l.Shard) - int64(s))
		})
		if !found {
			if want == 0 {
				continue
			}
			merged = slices.Insert(merged, i, Length{Shard: p.Shard, Length: want})
			continue
		}
		if want > merged[i].Length {
			merged[i].Length = want
		}
	}
	next = Cut{Index: prev.Index + 1, Start: prev.End, Lengths: merged}
	var total uint64
	for _, l := range merged {
		total += l.Length
	}
	grown := total - prev.Total()
	next.End = prev.End + grown
	return next, grown > 0
}
