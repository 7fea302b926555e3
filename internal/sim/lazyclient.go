package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/lazy"
)

// lazyClient appends with one round trip: the record's data to every
// replica of its shard and its metadata to every sequencing replica of the
// view it knows, in parallel; the append returns once all of them
// acknowledged in that one view. It retries what is missing, and starts
// over in a newer view when it learns of one.
type lazyClient struct {
	node
	w       *lazyRun
	id      uint64
	nextSeq uint64
	cfg     lazy.SeqConfig
	ops     map[uint64]*lazyOp
	// shards are the shards' configurations as the client last learned
	// them (it learns one again when a replica refuses data of an older
	// configuration, or when a replica it sends to left it).
	shards map[cut.ShardID]lazyShardConf
}

type lazyOp struct {
	rec       int
	view      uint64
	seqAcked  map[lazy.ReplicaID]bool
	dataAcked map[int]bool
	// members and epoch are the shard's configuration as the client knew
	// it when it sent the data (nil: take it at the next send): the data
	// is acknowledged once every one of them holds it.
	members []int
	epoch   uint64
}

func (w *lazyRun) addClient() {
	c := &lazyClient{node: node{name: fmt.Sprintf("c%d", len(w.clients)+1), up: true}, w: w,
		id: uint64(len(w.clients) + 1), ops: map[uint64]*lazyOp{}, shards: map[cut.ShardID]lazyShardConf{}}
	w.clients = append(w.clients, c)
	w.after(w.uniform(0, w.sc.appendEvery), c.next)
	w.every(&c.node, lazyRetryEvery, c.retry)
}

func (c *lazyClient) crash() {
	c.w.tracef("%s: crashes with %d appends open", c.name, len(c.ops))
	c.up, c.inc = false, c.inc+1
}

func (c *lazyClient) next() {
	w := c.w
	if !c.up || w.elapsed() >= w.sc.stopAppends {
		return
	}
	w.after(w.uniform(w.sc.appendEvery/2, w.sc.appendEvery*3/2), c.next)
	if len(c.ops) >= lazyInflightMax {
		return
	}
	c.nextSeq++
	id := lazy.RecordID{Client: c.id, Seq: c.nextSeq}
	rec := len(w.recs)
	live := w.liveShards()
	w.recs = append(w.recs, lazyRec{id: id, name: fmt.Sprintf("c%d.%d", c.id, c.nextSeq),
		shard: live[w.r.IntN(len(live))], call: w.elapsed()})
	w.byID[id] = rec
	op := &lazyOp{rec: rec}
	c.ops[id.Seq] = op
	c.begin(op)
}

// begin (re)starts op in the view the client knows.
func (c *lazyClient) begin(op *lazyOp) {
	op.view = c.cfg.View
	op.seqAcked, op.dataAcked, op.members = map[lazy.ReplicaID]bool{}, map[int]bool{}, nil
	c.send(op)
}

func (c *lazyClient) floor() uint64 {
	f := c.nextSeq + 1
	for s := range c.ops {
		f = min(f, s)
	}
	return f
}

// send sends op's data and metadata wherever they are not acknowledged.
func (c *lazyClient) send(op *lazyOp) {
	w := c.w
	if op.view == 0 {
		// No view known yet: the retry asks for one.
		return
	}
	r := w.recs[op.rec]
	inc, view := c.inc, op.view
	m := lazy.Meta{ID: r.id, Shard: r.shard, View: view, Floor: c.floor()}
	for _, id := range c.cfg.Replicas {
		if op.seqAcked[id] {
			continue
		}
		q := w.seq(id)
		w.send(c.name, &q.node, func() {
			_, err := q.core.Append(m)
			w.send(q.name, &c.node, func() {
				if c.inc != inc {
					return
				}
				c.answered(op, view, func() { op.seqAcked[q.id] = true }, err)
			})
		})
	}
	if op.members == nil {
		conf, ok := c.shards[r.shard]
		if !ok {
			conf = w.shardConf[r.shard]
			conf.members = slices.Clone(conf.members)
			c.shards[r.shard] = conf
		}
		if conf.epoch != op.epoch {
			// Acknowledgements count within one configuration: a
			// replica that took the data for another epoch (one it
			// ran out of it, say) vouches for nothing in this one.
			clear(op.dataAcked)
		}
		op.members, op.epoch = conf.members, conf.epoch
	}
	members, epoch := op.members, op.epoch
	for _, j := range members {
		n := w.shards[r.shard][j]
		if op.dataAcked[j] {
			continue
		}
		w.send(c.name, &n.node, func() {
			err := n.accept(op.rec, view, epoch)
			w.send(n.name, &c.node, func() {
				if c.inc != inc {
					return
				}
				if errors.Is(err, lazy.ErrStaleConfig) && slices.Equal(op.members, members) {
					op.members = nil
					if c.shards[r.shard].epoch <= epoch {
						delete(c.shards, r.shard)
					}
				}
				c.answered(op, view, func() { op.dataAcked[j] = true }, err)
			})
		})
	}
}

func (c *lazyClient) answered(op *lazyOp, view uint64, ok func(), err error) {
	w := c.w
	r := &w.recs[op.rec]
	if c.ops[r.id.Seq] != op || op.view != view {
		return
	}
	if err != nil {
		switch {
		case errors.Is(err, lazy.ErrWrongView) || errors.Is(err, lazy.ErrSealed):
			c.learn()
		case errors.Is(err, lazy.ErrLate):
			// Its position became a no-op: no replica's earlier
			// acknowledgement of its data counts until a newer view
			// binds it again (then every replica of the shard takes it
			// once more).
			clear(op.dataAcked)
		case errors.Is(err, lazy.ErrRingFull):
			// Pushed back: the retry timer tries again.
			w.stats.ringFull++
		}
		return
	}
	ok()
	c.complete(op)
}

// complete acknowledges op once every sequencing replica of its view
// holds its metadata and every replica of its shard's configuration its
// data.
func (c *lazyClient) complete(op *lazyOp) bool {
	w := c.w
	r := &w.recs[op.rec]
	seqs := len(op.seqAcked)
	data := op.members != nil && !slices.ContainsFunc(op.members, func(j int) bool { return !op.dataAcked[j] })
	if w.plant == bugLazyAckEarly && seqs > 0 && seqs < len(c.cfg.Replicas) && data {
		// Returns before every sequencing replica holds the metadata.
		w.planted = true
		seqs = len(c.cfg.Replicas)
	}
	if op.view == 0 || seqs < len(c.cfg.Replicas) || !data {
		return false
	}
	r.acked, r.ret = true, w.elapsed()
	w.stats.acked++
	delete(c.ops, r.id.Seq)
	w.tracef("%s: %s acknowledged in view %d", c.name, r.name, op.view)
	return true
}

// learn asks an ordering replica for the configuration it applied and
// starts every open append over if the view moved.
func (c *lazyClient) learn() {
	w := c.w
	inc := c.inc
	o := w.ords[w.r.IntN(len(w.ords))]
	w.send(c.name, &o.node, func() {
		if o.r.st.Lazy == nil {
			return
		}
		cfg := *o.r.st.Lazy
		cfg.Replicas = slices.Clone(cfg.Replicas)
		w.send(o.name, &c.node, func() {
			if c.inc != inc || cfg.View <= c.cfg.View {
				return
			}
			c.cfg = cfg
			for _, s := range slices.Sorted(mapKeys(c.ops)) {
				c.begin(c.ops[s])
			}
		})
	})
}

func (c *lazyClient) retry() {
	if len(c.ops) == 0 {
		return
	}
	for _, s := range slices.Sorted(mapKeys(c.ops)) {
		op := c.ops[s]
		shard := c.w.recs[op.rec].shard
		if len(c.w.members(shard)) == 0 {
			// Its shard was finalized: the append fails (the SDK follows
			// the shard table and gives up).
			c.w.tracef("%s: %s gives up: shard %d finalized", c.name, c.w.recs[op.rec].name, shard)
			delete(c.ops, s)
			continue
		}
		if slices.ContainsFunc(op.members, func(j int) bool { return !c.w.isMember(c.w.shards[shard][j]) }) {
			// A replica it sent to left the configuration: its stream
			// broke, and the client asks for the configuration again.
			op.members = nil
			if c.shards[shard].epoch <= op.epoch {
				delete(c.shards, shard)
			}
		}
		c.send(op)
	}
	c.learn()
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// lazyReader reads the log position after position, from any shard
// replica, following redirects to the shard that holds a position: what a
// decoupled reader of a lazy log does.
type lazyReader struct {
	node
	w       *lazyRun
	next    uint64
	entries []check.Entry
	busy    bool
}

func (rd *lazyReader) step() {
	w := rd.w
	w.after(w.uniform(200*time.Microsecond, time.Millisecond), rd.step)
	if rd.busy {
		return
	}
	rd.busy = true
	live := w.liveShards()
	sh := w.members(live[w.r.IntN(len(live))])
	rd.readAt(sh[w.r.IntN(len(sh))], rd.next, w.elapsed(), 0)
}

func (rd *lazyReader) readAt(n *shardNode, pos uint64, call time.Duration, hops int) {
	w := rd.w
	w.send(rd.name, &n.node, func() {
		n.read(pos, func(a lazy.ReadAnswer[int], err error) {
			var rec int
			var found bool
			if err == nil && a.Shard == n.shard && !a.Noop {
				rec, found = n.recordAt(a.Local)
				if !found {
					w.errorf("%s: position %d at local %d beyond its log of %d", n.name, pos, a.Local, len(n.log))
				}
			}
			w.send(n.name, &rd.node, func() {
				switch {
				case err != nil:
					rd.busy = false
				case a.Shard != n.shard:
					if hops > 2 {
						w.errorf("%s: position %d redirected in circles", rd.name, pos)
						return
					}
					sh := w.members(a.Shard)
					if len(sh) == 0 {
						// Every replica of its shard died for good: the
						// position cannot be read; the reader moves on.
						rd.next, rd.busy = pos+1, false
						return
					}
					rd.readAt(sh[w.r.IntN(len(sh))], pos, call, hops+1)
				case a.Noop:
					w.noopRd = append(w.noopRd, check.Read{Client: uint64(1000 + len(w.readers)), Pos: pos, Call: call, Return: w.elapsed()})
					rd.next, rd.busy = pos+1, false
				default:
					r := w.recs[rec]
					w.reads = append(w.reads, check.Read{Client: 1000, Pos: pos, Call: call, Return: w.elapsed(), Record: r.name})
					rd.entries = append(rd.entries, check.Entry{Pos: pos, Shard: r.shard, Record: r.name})
					rd.next, rd.busy = pos+1, false
				}
			})
		})
	})
}
