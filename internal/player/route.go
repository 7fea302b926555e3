package player

import (
	"slices"
	"strings"
)

// Route is the rule that maps a log entry to its targets. It must depend
// only on the entry and the Config: a recovery fetch routes the same entries
// again and must find the same targets.
type Route uint8

const (
	// RouteKeyHash sends an entry to one target, chosen by a hash of its key
	// over the targets.
	RouteKeyHash Route = iota
	// RouteTags sends an entry to the targets its record names in tags of
	// the form TargetTagPrefix+name. Names that are not targets are ignored;
	// an entry that names none goes nowhere.
	RouteTags
	// RouteAll sends every entry to every target.
	RouteAll
)

// TargetTagPrefix starts a record tag that names a target under RouteTags:
// the tag "target:pg1" sends the record to the target named pg1.
const TargetTagPrefix = "target:"

// Entry is one entry of the log as a fetcher hands it to the core.
type Entry struct {
	Index   Index
	Key     string
	Tags    []string
	Payload []byte
	// Noop marks a position that holds no record (a speculative cluster's
	// no-op): it goes to no target, but the main stream still passes it.
	Noop bool
}

// router applies a Route; it reuses one buffer, so the slice it returns is
// valid until its next call.
type router struct {
	route  Route
	n      int
	byName map[string]TargetID
	buf    []TargetID
}

func newRouter(cfg Config) router {
	r := router{route: cfg.Route, n: len(cfg.Targets), byName: map[string]TargetID{}}
	for i, name := range cfg.Targets {
		r.byName[name] = TargetID(i)
	}
	return r
}

// targets returns the targets of e in ascending order, without duplicates.
func (r *router) targets(e *Entry) []TargetID {
	r.buf = r.buf[:0]
	if e.Noop {
		return r.buf
	}
	switch r.route {
	case RouteKeyHash:
		r.buf = append(r.buf, TargetID(keyHash(e.Key)%uint64(r.n)))
	case RouteTags:
		for _, tag := range e.Tags {
			name, ok := strings.CutPrefix(tag, TargetTagPrefix)
			if !ok {
				continue
			}
			if id, ok := r.byName[name]; ok && !slices.Contains(r.buf, id) {
				r.buf = append(r.buf, id)
			}
		}
		slices.Sort(r.buf)
	case RouteAll:
		for i := range r.n {
			r.buf = append(r.buf, TargetID(i))
		}
	}
	return r.buf
}

// routes reports whether e goes to target id.
func (r *router) routes(e *Entry, id TargetID) bool {
	return slices.Contains(r.targets(e), id)
}

// keyHash is 64-bit FNV-1a, written out so that hashing a key allocates
// nothing and never changes with a library version.
func keyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// TargetsOf returns the targets cfg routes e to, in ascending order, in a
// fresh slice: what a checker outside the core uses to know which entries
// each target must apply.
func TargetsOf(cfg Config, e *Entry) []TargetID {
	r := newRouter(cfg)
	return slices.Clone(r.targets(e))
}
