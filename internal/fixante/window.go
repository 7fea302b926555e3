// Package fixante is the arithmetic of fix-ante ordering (SpecLog, the
// Belfast system): a lease window of W predetermined cuts in which every
// shard contributes a fixed quota of entries (records or no-ops) to the cuts
// of its group, so that each shard can compute the global position of each
// of its entries before any actual cut exists. It is pure: no I/O, clocks or
// goroutines.
//
// Within one predetermined cut, entries are ordered like Scalog's: by
// ascending shard id, then by each shard's local order. With g groups, cut j
// of a window includes only the shards of group j mod g (staggered cuts);
// with g = 1 every shard is in every cut.
package fixante

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/cut"
)

// Quota is one shard's share of every cut of its group in a window.
type Quota struct {
	Shard cut.ShardID
	// PerCut is how many entries the shard adds to each cut of its group;
	// 0 excludes it from the window (a straggler, or a shard leaving).
	PerCut uint64
	// Group is the shard's staggering group, in [0, Groups).
	Group int
	// Base is how many entries the shard had before the window: its local
	// index of the window's first entry.
	Base uint64
}

// Window is one lease window: cuts [FirstCut, FirstCut+Cuts) predetermined
// from Quotas, starting at global position Start. Quotas is sorted by shard.
type Window struct {
	Index    uint64
	FirstCut uint64
	Cuts     uint64
	Start    uint64
	Groups   int
	Quotas   []Quota
}

// Errors of Validate.
var (
	ErrNoCuts      = errors.New("fixante: a window needs at least one cut")
	ErrGroups      = errors.New("fixante: bad group count")
	ErrQuotaOrder  = errors.New("fixante: quotas must be sorted by shard, without repeats")
	ErrEmptyGroup  = errors.New("fixante: a group has no shard with a quota")
	ErrCutOverflow = errors.New("fixante: window positions overflow")
)

// Validate checks w: at least one cut, 1 ≤ Groups ≤ shards with a quota,
// every shard in a valid group, quotas sorted, every group non-empty (else
// its cuts would be empty and never released).
func (w Window) Validate() error {
	if w.Cuts == 0 {
		return ErrNoCuts
	}
	active := 0
	for _, q := range w.Quotas {
		if q.PerCut > 0 {
			active++
		}
	}
	if w.Groups < 1 || (active > 0 && w.Groups > active) {
		return fmt.Errorf("%w: %d groups for %d shards with a quota", ErrGroups, w.Groups, active)
	}
	for i, q := range w.Quotas {
		if i > 0 && w.Quotas[i-1].Shard >= q.Shard {
			return ErrQuotaOrder
		}
		if q.Group < 0 || q.Group >= w.Groups {
			return fmt.Errorf("%w: shard %d in group %d of %d", ErrGroups, q.Shard, q.Group, w.Groups)
		}
	}
	if active > 0 {
		for g := 0; g < w.Groups; g++ {
			if w.groupSize(g) == 0 {
				return fmt.Errorf("%w: group %d", ErrEmptyGroup, g)
			}
		}
	}
	// Every position of the window must fit in a uint64.
	var cycle uint64
	for g := 0; g < w.Groups; g++ {
		cycle += w.groupSize(g)
	}
	if cycle > 0 && w.Cuts/uint64(w.Groups)+1 > (math.MaxUint64-w.Start)/cycle {
		return ErrCutOverflow
	}
	return nil
}

// groupSize is how many entries one cut of group g adds.
func (w Window) groupSize(g int) uint64 {
	var n uint64
	for _, q := range w.Quotas {
		if q.Group == g {
			n += q.PerCut
		}
	}
	return n
}

// quota returns shard's quota, if it has one in w.
func (w Window) quota(shard cut.ShardID) (Quota, bool) {
	i, ok := slices.BinarySearchFunc(w.Quotas, shard, func(q Quota, s cut.ShardID) int {
		return int(int64(q.Shard) - int64(s))
	})
	if !ok || w.Quotas[i].PerCut == 0 {
		return Quota{}, false
	}
	return w.Quotas[i], true
}

// CutStart is the global position of the first entry of the window's j-th
// cut (0 ≤ j ≤ Cuts; CutStart(Cuts) is End).
func (w Window) CutStart(j uint64) uint64 {
	g := uint64(w.Groups)
	var cycle uint64
	for k := 0; k < w.Groups; k++ {
		cycle += w.groupSize(k)
	}
	pos := w.Start + (j/g)*cycle
	for k := uint64(0); k < j%g; k++ {
		pos += w.groupSize(int(k))
	}
	return pos
}

// End is the position right after the window's last entry: where the next
// window starts.
func (w Window) End() uint64 { return w.CutStart(w.Cuts) }

// Includes reports whether shard must report for the window's j-th cut.
func (w Window) Includes(shard cut.ShardID, j uint64) bool {
	q, ok := w.quota(shard)
	return ok && uint64(q.Group) == j%uint64(w.Groups)
}

// Entries is how many entries shard must have reported in this window once
// the window's j-th cut (0-based, inclusive) is satisfied.
func (w Window) Entries(shard cut.ShardID, j uint64) uint64 {
	q, ok := w.quota(shard)
	if !ok {
		return 0
	}
	j = min(j, w.Cuts-1)
	// Cuts 0..j hold (j+1)/g whole rounds of the groups, each with one cut
	// of the shard's group, then the first (j+1)%g groups once more.
	g := uint64(w.Groups)
	mine := (j + 1) / g
	if (j+1)%g > uint64(q.Group) {
		mine++
	}
	return mine * q.PerCut
}

// Capacity is how many entries shard contributes in the whole window.
func (w Window) Capacity(shard cut.ShardID) uint64 {
	return w.Entries(shard, w.Cuts-1)
}

// Predict returns the global position and window cut (0-based) of shard's
// k-th entry (0-based, counting no-ops) in this window. ok is false when the
// shard has no quota here or k is beyond the window's capacity: that entry
// belongs to a later window.
func (w Window) Predict(shard cut.ShardID, k uint64) (pos, j uint64, ok bool) {
	q, has := w.quota(shard)
	if !has {
		return 0, 0, false
	}
	nth := k / q.PerCut // which of the shard's cuts
	j = uint64(q.Group) + nth*uint64(w.Groups)
	if j >= w.Cuts {
		return 0, 0, false
	}
	pos = w.CutStart(j)
	for _, o := range w.Quotas {
		if o.Shard >= shard {
			break
		}
		if o.PerCut > 0 && o.Group == q.Group {
			pos += o.PerCut
		}
	}
	return pos + k%q.PerCut, j, true
}

// Locate is Predict for the shard's entry at local index local (counting
// no-ops from the shard's first entry).
func (w Window) Locate(shard cut.ShardID, local uint64) (pos, j uint64, ok bool) {
	q, has := w.quota(shard)
	if !has || local < q.Base {
		return 0, 0, false
	}
	return w.Predict(shard, local-q.Base)
}

// Length is shard's local length once the window's j-th cut is released,
// and whether the window gives the shard a quota at all.
func (w Window) Length(shard cut.ShardID, j uint64) (uint64, bool) {
	q, ok := w.quota(shard)
	if !ok {
		return 0, false
	}
	return q.Base + w.Entries(shard, j), true
}

// Boundary is the first quota boundary of shard after local length n within
// this window: the length at which its next report completes a cut. ok is
// false when n is at or past the window's last boundary for the shard.
func (w Window) Boundary(shard cut.ShardID, n uint64) (uint64, bool) {
	q, has := w.quota(shard)
	if !has {
		return 0, false
	}
	end := q.Base + w.Capacity(shard)
	if n >= end {
		return 0, false
	}
	if n < q.Base {
		return q.Base + q.PerCut, true
	}
	return q.Base + ((n-q.Base)/q.PerCut+1)*q.PerCut, true
}

// ShardEnd is the shard's local length once the window is done, or ok
// false when the shard has no quota here.
func (w Window) ShardEnd(shard cut.ShardID) (uint64, bool) {
	q, ok := w.quota(shard)
	if !ok {
		return 0, false
	}
	return q.Base + w.Capacity(shard), true
}

// Quota returns shard's quota, if it has a non-zero one in w.
func (w Window) Quota(shard cut.ShardID) (Quota, bool) { return w.quota(shard) }

// Satisfied reports whether the reports satisfy the window's j-th cut:
// every shard the cut includes has reported at least the entries it owes by
// then. reported gives a shard's entries reported in this window.
func (w Window) Satisfied(j uint64, reported func(cut.ShardID) uint64) bool {
	for _, q := range w.Quotas {
		if w.Includes(q.Shard, j) && reported(q.Shard) < w.Entries(q.Shard, j) {
			return false
		}
	}
	return true
}

// RateQuota is the per-cut quota that makes a shard ingesting rate records
// per second report about once per ordering interval: at least 1.
func RateQuota(rate float64, interval time.Duration) uint64 {
	q := math.Round(rate * interval.Seconds())
	if q < 1 || math.IsNaN(q) {
		return 1
	}
	return uint64(q)
}

// Range is a run of consecutive global positions.
type Range struct {
	Start uint64 `json:"s"`
	Count uint64 `json:"n"`
}

// Slots returns the positions of shard's entries in this window from local
// index from on, one range per cut.
func (w Window) Slots(shard cut.ShardID, from uint64) []Range {
	q, ok := w.quota(shard)
	if !ok {
		return nil
	}
	var out []Range
	for j := uint64(q.Group); j < w.Cuts; j += uint64(w.Groups) {
		end := q.Base + w.Entries(shard, j)
		first := max(end-q.PerCut, from)
		if first >= end {
			continue
		}
		pos, _, _ := w.Locate(shard, first)
		out = append(out, Range{Start: pos, Count: end - first})
	}
	return out
}
