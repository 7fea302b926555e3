package segment

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// model is the naive twin of a Store: every local index in a slice, runs
// in a slice, linear searches. A no-op index holds what Read must return
// for it: Entry{Noops: indexes left to the end of its stored run}.
type model struct {
	entries []Entry
	start   uint64
	runs    []Run
	// synced is how many records are known durable (Sync, Trim, SyncAlways);
	// a simulated crash may lose only records after it.
	synced uint64
}

func (m *model) len() uint64 { return uint64(len(m.entries)) }

// append adds batch the way Append stores it: consecutive no-op entries
// coalesce into one run.
func (m *model) append(batch []Entry) {
	for i := 0; i < len(batch); {
		if batch[i].Noops == 0 {
			m.entries = append(m.entries, batch[i])
			i++
			continue
		}
		var count uint64
		for ; i < len(batch) && batch[i].Noops > 0; i++ {
			count += batch[i].Noops
		}
		for k := count; k > 0; k-- {
			m.entries = append(m.entries, Entry{Noops: k})
		}
	}
}

// covers is how many indexes a Scan call with e covers.
func covers(e Entry) uint64 { return max(e.Noops, 1) }

// midRun says whether local index l falls strictly inside a no-op run, so
// that no frame starts there.
func (m *model) midRun(l uint64) bool {
	return l > 0 && l < m.len() && m.entries[l-1].Noops > 1
}

func (m *model) ordered() uint64 {
	if len(m.runs) == 0 {
		return 0
	}
	r := m.runs[len(m.runs)-1]
	return r.LocalStart + r.Count
}

func (m *model) globalOf(local uint64) (uint64, bool) {
	for _, r := range m.runs {
		if local >= r.LocalStart && local < r.LocalStart+r.Count {
			return r.GlobalStart + local - r.LocalStart, true
		}
	}
	return 0, false
}

func (m *model) locate(global uint64) (uint64, bool) {
	for _, r := range m.runs {
		if global >= r.GlobalStart && global < r.GlobalStart+r.Count {
			return r.LocalStart + global - r.GlobalStart, true
		}
	}
	return 0, false
}

// dropRunsBelowStart applies the retention rule: runs wholly below start
// go, except the last.
func (m *model) dropRunsBelowStart() {
	for len(m.runs) > 1 && m.runs[0].LocalStart+m.runs[0].Count <= m.start {
		m.runs = m.runs[1:]
	}
}

func randomEntry(rng *rand.Rand) Entry {
	e := Entry{
		ClientID: rng.Uint64() >> rng.Intn(64),
		Seq:      rng.Uint64() >> rng.Intn(64),
		Key:      randomString(rng, rng.Intn(12)),
	}
	for range rng.Intn(4) {
		e.Tags = append(e.Tags, randomString(rng, rng.Intn(6)))
	}
	if n := rng.Intn(300); n > 0 && rng.Intn(8) > 0 {
		e.Payload = make([]byte, n)
		rng.Read(e.Payload)
	}
	return e
}

// randomBatch mixes records and no-op runs: mostly short runs (quota
// fills), now and then a long one (a rate-change fill), and sometimes
// several no-op entries in a row, which Append coalesces.
func randomBatch(rng *rand.Rand) []Entry {
	batch := make([]Entry, 1+rng.Intn(8))
	for i := range batch {
		switch r := rng.Intn(100); {
		case r < 3:
			batch[i] = Entry{Noops: 1 + uint64(rng.Intn(3000))}
		case r < 25:
			batch[i] = Entry{Noops: 1 + uint64(rng.Intn(20))}
		default:
			batch[i] = randomEntry(rng)
		}
	}
	return batch
}

func randomString(rng *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + rng.Intn(26))
	}
	return string(b)
}

// nextRun makes a valid run for the next count records, following m's last
// run with random gaps in cuts and positions.
func (m *model) nextRun(rng *rand.Rand, count uint64) Run {
	var prev Run
	if len(m.runs) > 0 {
		prev = m.runs[len(m.runs)-1]
	}
	r := Run{Cut: prev.Cut + 1 + uint64(rng.Intn(2)), LocalStart: m.ordered(), Count: count}
	r.CutStart = prev.CutEnd + uint64(rng.Intn(3))
	r.GlobalStart = r.CutStart + uint64(rng.Intn(3))
	r.CutEnd = r.GlobalStart + count + uint64(rng.Intn(3))
	return r
}

// modelStats counts events of the histories, to check that the seeds
// reach the cases the test is meant to cover.
type modelStats struct {
	noopRuns, coalesced          int // no-op runs appended; batches with adjacent no-op entries
	readsInRun, scansFromInRun   int // Reads and Scans starting strictly inside a run
	locatedNoops                 int // Locate hits on no-op indexes
	tornNoops                    int // simulated crashes cutting inside a no-op frame
	trimmedNoops, rolledOverRuns int // Trims dropping no-op indexes; runs in non-active segments
}

func TestStoreMatchesModel(t *testing.T) {
	var total modelStats
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			st := runModel(t, seed, 700)
			total.noopRuns += st.noopRuns
			total.coalesced += st.coalesced
			total.readsInRun += st.readsInRun
			total.scansFromInRun += st.scansFromInRun
			total.locatedNoops += st.locatedNoops
			total.tornNoops += st.tornNoops
			total.trimmedNoops += st.trimmedNoops
			total.rolledOverRuns += st.rolledOverRuns
		})
	}
	t.Logf("%+v", total)
	v := reflect.ValueOf(total)
	for i := range v.NumField() {
		if v.Field(i).Int() == 0 && !t.Failed() {
			t.Errorf("no seed covers %s: %+v", v.Type().Field(i).Name, total)
		}
	}
}

func runModel(t *testing.T, seed int64, steps int) (st modelStats) {
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	opts := Options{
		Dir:             dir,
		SegmentBytesMax: int64(200 + rng.Intn(3000)),
		Sync:            SyncPolicy(rng.Intn(3)),
	}
	t.Logf("seed %d, options %+v", seed, opts)
	s := mustOpen(t, opts)
	defer func() { s.Close() }()
	m := &model{}

	reopen := func(damage func()) {
		t.Helper()
		mustClose(t, s)
		if damage != nil {
			damage()
		}
		s = mustOpen(t, opts)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}

	for step := range steps {
		switch op := rng.Intn(100); {
		case op < 35: // append records and no-op runs
			batch := randomBatch(rng)
			first, err := s.Append(batch)
			if err != nil || first != m.len() {
				fail("step %d: Append = %d, %v; want %d", step, first, err, m.len())
			}
			m.append(batch)
			for i := range batch {
				if batch[i].Noops > 0 {
					st.noopRuns++
					if i > 0 && batch[i-1].Noops > 0 {
						st.coalesced++
					}
				}
			}
			if opts.Sync == SyncAlways {
				m.synced = m.len()
			}

		case op < 55: // assign
			if m.ordered() == m.len() {
				continue
			}
			n := min(m.len()-m.ordered(), 10)
			if rng.Intn(4) == 0 {
				n = min(m.len()-m.ordered(), 5000) // catch up over long no-op runs
			}
			r := m.nextRun(rng, 1+uint64(rng.Int63n(int64(n))))
			if err := s.Assign(r); err != nil {
				fail("step %d: Assign(%+v): %v", step, r, err)
			}
			m.runs = append(m.runs, r)

		case op < 60: // assign something invalid
			r := m.nextRun(rng, 1)
			switch rng.Intn(4) {
			case 0:
				r.LocalStart++
			case 1:
				r.Count = m.len() - m.ordered() + 1
				r.CutEnd = r.GlobalStart + r.Count
			case 2:
				r.Count = 0
			case 3:
				r.CutEnd = r.GlobalStart
			}
			if err := s.Assign(r); !errors.Is(err, ErrInvalid) {
				fail("step %d: Assign(%+v) = %v, want ErrInvalid", step, r, err)
			}

		case op < 72: // read and locate
			l := uint64(rng.Int63n(int64(m.len() + 3)))
			e, err := s.Read(l)
			switch {
			case l < m.start:
				if !errors.Is(err, ErrTrimmed) {
					fail("step %d: Read(%d) below start %d = %v", step, l, m.start, err)
				}
			case l >= m.len():
				if !errors.Is(err, ErrOutOfRange) {
					fail("step %d: Read(%d) past len %d = %v", step, l, m.len(), err)
				}
			case err != nil || !reflect.DeepEqual(e, m.entries[l]):
				fail("step %d: Read(%d) = %+v, %v; want %+v", step, l, e, err, m.entries[l])
			case m.midRun(l):
				st.readsInRun++
			}
			gm, okm := m.globalOf(l)
			if g, ok := s.GlobalOf(l); g != gm || ok != okm {
				fail("step %d: GlobalOf(%d) = %d, %v; want %d, %v", step, l, g, ok, gm, okm)
			}
			if len(m.runs) > 0 {
				last := m.runs[len(m.runs)-1]
				g := m.runs[0].GlobalStart + uint64(rng.Int63n(int64(last.CutEnd-m.runs[0].GlobalStart+3)))
				lm, okm := m.locate(g)
				if l, ok := s.Locate(g); l != lm || ok != okm {
					fail("step %d: Locate(%d) = %d, %v; want %d, %v", step, g, l, ok, lm, okm)
				}
				if okm && lm < m.len() && m.entries[lm].Noops > 0 {
					st.locatedNoops++
				}
			}

		case op < 77: // scan part of the log
			from := uint64(rng.Int63n(int64(m.len() + 2)))
			n := rng.Intn(20)
			next := max(from, m.start)
			if next >= m.start && m.midRun(next) {
				st.scansFromInRun++
			}
			err := s.Scan(from, func(l uint64, e Entry) bool {
				if l != next || !reflect.DeepEqual(e, m.entries[l]) {
					fail("step %d: Scan(%d) gave %d: %+v, want %d: %+v", step, from, l, e, next, m.entries[next])
				}
				next += covers(e)
				n--
				return n > 0
			})
			if err != nil {
				fail("step %d: Scan(%d): %v", step, from, err)
			}

		case op < 85: // trim
			if len(m.runs) == 0 {
				continue
			}
			last := m.runs[len(m.runs)-1]
			g := m.runs[0].GlobalStart + uint64(rng.Int63n(int64(last.CutEnd-m.runs[0].GlobalStart+5)))
			// Records [start, below) are ordered below g; a segment goes
			// when it ends at or before below and is not the active one.
			below := m.ordered()
			for l := m.runs[0].LocalStart; l < m.ordered(); l++ {
				if gl, _ := m.globalOf(l); gl >= g {
					below = l
					break
				}
			}
			want := m.start
			for _, seg := range s.segs {
				if seg.base <= below {
					want = max(want, seg.base)
				}
			}
			if err := s.Trim(g); err != nil {
				fail("step %d: Trim(%d): %v", step, g, err)
			}
			if s.Start() != want {
				fail("step %d: Trim(%d): Start = %d, want %d", step, g, s.Start(), want)
			}
			for l := m.start; l < want; l++ {
				if m.entries[l].Noops > 0 {
					st.trimmedNoops++
					break
				}
			}
			m.start = want
			m.dropRunsBelowStart()
			m.synced = m.len()

		case op < 88: // sync
			if err := s.Sync(); err != nil {
				fail("step %d: Sync: %v", step, err)
			}
			m.synced = m.len()

		case op < 92: // clean reopen
			reopen(nil)
			m.dropRunsBelowStart()

		case op < 96: // crash that loses unsynced records at the tail
			a := s.active()
			keep := max(m.synced, a.base)
			lo := a.size
			if keep < a.end() {
				lo = frameOffset(a, keep)
			}
			cut := lo + rng.Int63n(a.size-lo+1)
			if rng.Intn(2) == 0 {
				// Aim at an unsynced no-op frame, if there is one: they are
				// small, so a random cut rarely tears one.
				for _, nf := range a.noops {
					if off := int64(a.offsets[nf.frame]); off >= lo && rng.Intn(2) == 0 {
						cut = off + 1 + rng.Int63n(a.frameEnd(int(nf.frame))-off-1)
						break
					}
				}
			}
			for _, nf := range a.noops {
				if off := int64(a.offsets[nf.frame]); off < cut && cut < a.frameEnd(int(nf.frame)) {
					st.tornNoops++
				}
			}
			path := s.segmentPath(a.base)
			reopen(func() {
				if err := os.Truncate(path, cut); err != nil {
					t.Fatal(err)
				}
			})
			n := s.Len()
			if n < keep || n > m.len() || m.midRun(n) {
				fail("step %d: after crash Len = %d, want within [%d, %d] and not inside a no-op run", step, n, keep, m.len())
			}
			m.entries = m.entries[:n]
			for len(m.runs) > 0 && m.ordered() > n {
				m.runs = m.runs[:len(m.runs)-1]
			}
			m.dropRunsBelowStart()

		default: // crash that leaves garbage after the last segment or run
			garbage := make([]byte, 1+rng.Intn(40))
			rng.Read(garbage)
			path := lastSeg(t, dir)
			if rng.Intn(2) == 0 {
				path = filepath.Join(dir, positionsName)
			}
			reopen(func() { appendFile(t, path, garbage) })
			m.dropRunsBelowStart()
		}

		if s.Len() != m.len() || s.Start() != m.start || s.Ordered() != m.ordered() {
			fail("step %d: Len, Start, Ordered = %d, %d, %d; want %d, %d, %d",
				step, s.Len(), s.Start(), s.Ordered(), m.len(), m.start, m.ordered())
		}
		if got := s.Runs(0); !reflect.DeepEqual(got, m.runs) && (len(got) != 0 || len(m.runs) != 0) {
			fail("step %d: Runs = %+v, want %+v", step, got, m.runs)
		}
		checkIndex(t, s)
		for _, g := range s.segs[:len(s.segs)-1] {
			st.rolledOverRuns += len(g.noops)
		}
	}

	// Finally every stored record, after one more reopen.
	reopen(nil)
	next := m.start
	err := s.Scan(0, func(l uint64, e Entry) bool {
		if l != next || !reflect.DeepEqual(e, m.entries[l]) {
			fail("final Scan gave %d: %+v, want %d: %+v", l, e, next, m.entries[next])
		}
		next += covers(e)
		return true
	})
	if err != nil || next != m.len() {
		fail("final Scan ended at %d with %v, want %d", next, err, m.len())
	}
	return st
}
