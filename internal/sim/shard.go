package sim

import (
	"math"
	"slices"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/internal/control"
	"github.com/augur-log/augur/internal/cut"
	"github.com/augur-log/augur/internal/fixante"
	"github.com/augur-log/augur/internal/order"
	"github.com/augur-log/augur/internal/segment"
	core "github.com/augur-log/augur/internal/shard"
	"github.com/augur-log/augur/internal/spec"
)

// A shard is f+1 storage servers' copies of it (scenario.replicas: 2 or
// 3, the group sizes a cluster file allows), each the storage server's
// replica core (shard.Replica) over an in-memory log (shard.MemLog) that
// loses what was not synced when its server crashes. The simulator plays
// the storage servers' part around the cores: it batches appends into the
// primary's turns, carries replicate batches, joins and backup
// acknowledgements over the simulated network, syncs the logs as
// the sync policy says, sends reports and heartbeats, hands the copies
// the control events their watch streams bring, answers clients only
// with what the cores' outputs answer (or, for the appends a crash left
// unanswered, what the copies' Replica.Resolve says), and feeds
// subscribers.

// primaryCopy is the copy that is primary at registration; a failover
// makes another one primary (shard.prim). The others are backups: a cut
// orders only what every copy of the configuration holds.
const primaryCopy = 0

// The copies per shard a scenario may choose: a cluster file's group
// sizes (config.GroupServersMin and GroupServersMax).
const (
	copiesMin = 2
	copiesMax = 3
)

// groupReplicas names the n storage servers of a group's shard, its first
// copy the primary.
func groupReplicas(group string, n int) []control.Replica {
	reps := make([]control.Replica, n)
	for i := range reps {
		reps[i] = control.Replica{ID: group + "/" + itoa(i), Addr: group, Incarnation: 1}
	}
	return reps
}

// syncPolicy says when a storage server fsyncs its logs.
type syncPolicy int

const (
	// syncAlways fsyncs every write before the core's output is carried
	// out (segment.SyncAlways): no acknowledgement, answer or report
	// covers an unsynced write.
	syncAlways syncPolicy = iota
	// syncInterval fsyncs at most scenario.syncEvery after a write
	// (segment.SyncInterval): a crash loses the unsynced tail, which only
	// the other copy then holds.
	syncInterval
	// syncGroup is the configuration's default, group commit
	// (segment.SyncGroup with Config.HeldWhenSynced): one fsync at a
	// time beside the writes, covering every write before it, and a copy
	// holds an entry only once a fsync covered it. The fsync's end
	// reaches the core later (Synced), as the storage server's sync loop
	// tells it after the fsync returns, so a batch replicated meanwhile
	// finds the fsync first: a backup acknowledges whenever a core call
	// says durable moved, and only then (see copyOf.synced).
	syncGroup
)

func (p syncPolicy) String() string {
	switch p {
	case syncInterval:
		return "interval"
	case syncGroup:
		return "group"
	}
	return "always"
}

// durable says no acknowledgement, answer or report covers a write before
// a fsync did: the promise of the durable default.
func (p syncPolicy) durable() bool { return p != syncInterval }

// copyOf is one storage server's copy of a shard.
type copyOf struct {
	sh  *shard
	idx int
	// server is the storage server's id in the shard's configuration.
	server string
	r      *core.Replica[int64]
	// ord is a primary's ordering (mode.Mode's), nil on other copies.
	ord core.Ordering
	log *core.MemLog
	up  bool
	// inc counts the server's incarnations: what was sent to or by an
	// earlier one is lost with it.
	inc int
	// crashed says the server crashed once; it restarted read-only.
	crashed bool
	// damage says the server restarts with a range of its log damaged,
	// killSource that its repair's source dies after the first batch.
	damage, killSource bool
	// syncArmed says an interval sync, or a group commit's fsync, is
	// scheduled; syncAgain that a write came while a group commit's
	// fsync ran, which the next one covers. wakeAt is the primary's
	// timer (zero: none).
	syncArmed, syncAgain bool
	wakeAt               time.Time
	// ackSent is the durable length a backup last acknowledged to its
	// primary, or answered a join with, in configuration ackEpoch: under
	// group commit every raise of its durable length must reach the
	// primary that joined it (see synced).
	ackSent, ackEpoch uint64
	// leftOutAfter is the last cut committed before the configuration
	// that left the copy out (valid once leftOut): a copy that restarts
	// replays the cuts up to it, then that configuration, then the rest,
	// in the order the events came.
	leftOut      bool
	leftOutAfter uint64
	// repl carries the primary's joins and batches to this copy as a
	// backup, acks its answers back: one replication stream, FIFO each
	// way. refusedIn is the configuration in which this copy refused the
	// primary's join (the stream broke): the primary's heartbeat says it
	// cannot reach it until the leader takes it out.
	repl, acks link
	refusedIn  uint64
	// rejoinFor is one more than the incarnation whose rejoin runs (0:
	// none); rejoinSourceDies and diesRejoining fail that rejoin (see
	// planRejoin).
	rejoinFor                       int
	rejoinSourceDies, diesRejoining bool
	// askedBehind is one more than the incarnation that asked to rejoin
	// behind (the planted bugRejoinBehind; 0: none).
	askedBehind int
	// primaryDies crashes the shard's primary once the copy is back in
	// its configuration (see planRejoin); primaryDiesArmed says it is
	// due.
	primaryDies      primaryDeath
	primaryDiesArmed bool
	// repairing says the copy's repair of damaged ranges runs: a rejoin,
	// which may drop some of them with the tail, waits for it.
	repairing bool
	// pausedUntil is when the server, stopped without dying, runs again
	// (see pause.go); held is what reached it meanwhile, in order.
	pausedUntil time.Time
	held        []func()
}

func (c *copyOf) name() string {
	return c.server + "(" + c.r.Role().String() + ")"
}

// shard is one shard: its copies, its report and subscription streams,
// and what the simulator knows of it.
type shard struct {
	s    *cluster
	id   cut.ShardID
	name string
	feed streamRules
	// copies are the shard's copies, one per server of its group; prim
	// is the primary's index, and member says which copies the
	// configuration (epoch) holds.
	copies []*copyOf
	prim   int
	member []bool
	// pending says a member joined in speculative order and its primary
	// has not vouched for it yet: it is no survivor of the primary.
	pending []bool
	epoch   uint64
	// split, if not nil, names two copies whose servers a partition cut
	// off from each other for good: replication between them is lost,
	// and a primary notices at splitSeen.
	split     *[2]*copyOf
	splitSeen time.Time
	// reported lists the crashed servers a survivor reports at the next
	// crash report (one command for a crash of several at once).
	reported []string
	// log mirrors what the primary stored, by local index (record ids and
	// no-ops): the truth the committed cuts order. records counts its
	// records; durable is the most the primary ever held durably.
	log     []int64
	records uint64
	durable uint64
	// queue holds the appends waiting for the primary's next turn.
	queue     []core.Append[int64]
	turnArmed bool
	tickArmed bool

	// alive says no copy crashed or failed; accepting that it takes
	// appends.
	alive, accepting, leaving, finalized bool
	finalLen                             uint64
	// eager says the cluster is between windows (control.Spec.Eager).
	eager bool
	// resolved says the clients resolved the appends the shard's primary
	// never answered.
	resolved bool

	knownCut cut.Cut // the last cut the shard heard of
	hist     []spec.Item[int64]
	streams  []*stream
	report   link
	// straggle delays reports by extra while now is in [from, until).
	straggleFrom, straggleUntil time.Time
	straggleExtra               time.Duration
	// deafUntil and muteUntil bound a partition from the leader: the
	// leader does not hear the shard until deafUntil (reports are lost),
	// the shard does not hear the leader until muteUntil (control events
	// wait, lag-fixes are lost).
	deafUntil, muteUntil time.Time
	// view is the last view the shard heard of.
	view uint64
}

// stream is a subscription stream: a link and the message being filled.
type stream struct {
	link
	pending *subMsg
}

// hist bounds: a stream that reconnects repeats part of what it sent.
const (
	histMax  = 4096
	histKeep = 64
	// repeatMax bounds how many items a reconnected stream repeats.
	repeatMax = 40
)

// Storage servers' timings.
const (
	// turnDelayMin and turnDelayMax bound how long an append waits for
	// the primary's next turn (its batch).
	turnDelayMin = 5 * time.Microsecond
	turnDelayMax = 40 * time.Microsecond
	// diskDelayMin and diskDelayMax bound a backup's write and fsync
	// before it acknowledges.
	diskDelayMin = 20 * time.Microsecond
	diskDelayMax = 120 * time.Microsecond
)

func (s *cluster) addShard(id cut.ShardID, name string, quota uint64, snap *control.State) {
	sh := &shard{s: s, id: id, name: name, alive: true, accepting: true, knownCut: snap.LastCut}
	sh.feed = s.newStream(sh)
	row := snap.Shard(id)
	sh.epoch = row.Epoch
	var backups []string
	for _, r := range row.Replicas[1:] {
		backups = append(backups, r.ID)
	}
	for i, r := range row.Replicas {
		c := &copyOf{sh: sh, idx: i, server: r.ID, log: core.NewMemLog(), up: true, ackEpoch: row.Epoch}
		cfg := core.Config{ID: id, Role: core.RoleBackup, Epoch: row.Epoch, LastCut: snap.LastCut.Index, HeldWhenSynced: s.sc.sync == syncGroup}
		if i == primaryCopy {
			c.ord = s.md.NewShardOrdering(id, 0, s.now)
			cfg.Role, cfg.Backups, cfg.Ordering = core.RolePrimary, backups, c.ord
		}
		c.r = core.NewReplica[int64](cfg, c.log)
		sh.copies = append(sh.copies, c)
		sh.member = append(sh.member, true)
		sh.pending = append(sh.pending, false)
	}
	for range s.subs {
		sh.streams = append(sh.streams, &stream{})
	}
	s.shards[id] = sh
	s.order = append(s.order, sh)
	slices.SortFunc(s.order, func(a, b *shard) int { return int(a.id) - int(b.id) })
	s.tracef("shard %d registered (quota %d)", id, quota)
	sh.onState(control.Event{}, snap)
	sh.heartbeat()
}

// primary is the copy that is (or was last) the shard's primary.
func (sh *shard) primary() *copyOf { return sh.copies[sh.prim] }

// backups are the primary's backups in the configuration.
func (sh *shard) backups() []*copyOf {
	var bs []*copyOf
	for i, c := range sh.copies {
		if i != sh.prim && sh.member[i] {
			bs = append(bs, c)
		}
	}
	return bs
}

// serves says copy i is in the configuration, runs (up and not paused)
// and serves in it (a copy back from a crash is read-only and does not),
// and is a survivor of its primary (not pending its primary's word,
// control.Replica.Pending).
func (sh *shard) serves(i int) bool {
	c := sh.copies[i]
	role := c.r.Role()
	return sh.member[i] && !sh.pending[i] && c.running() && (role == core.RolePrimary || role == core.RoleBackup)
}

// serving counts the copies that serve (see serves).
func (sh *shard) serving() int {
	n := 0
	for i := range sh.copies {
		if sh.serves(i) {
			n++
		}
	}
	return n
}

// survivesSplit says a copy that serves survives that no partition cuts
// off from the (last) primary.
func (sh *shard) survivesSplit() bool {
	for i, c := range sh.copies {
		if sh.serves(i) && !sh.severed(sh.primary(), c) {
			return true
		}
	}
	return false
}

// severed says a partition cuts copies a and b off from each other.
func (sh *shard) severed(a, b *copyOf) bool {
	return sh.split != nil && (sh.split[0] == a && sh.split[1] == b || sh.split[0] == b && sh.split[1] == a)
}

// degraded says the shard serves on fewer servers than it started with:
// a failover left some out, or a crash took some that it has not left out
// yet. One more failure is beyond its fault budget unless it loses
// nothing (a crash of a server that syncs every write).
func (sh *shard) degraded() bool { return sh.serving() < len(sh.copies) }

// whole says every server of the shard serves and none is cut off from
// its primary: a whole-shard failure, which takes the primary for good,
// then stays within the fault budget, because the backups hold whatever
// the shard made durable. A backup cut off from its primary is about to
// be left out, and a failure after that loses what only the primary held
// (entries a cut ordered that no surviving copy has).
func (sh *shard) whole() bool { return !sh.degraded() && sh.split == nil }

// forgetfulClient is the client id of a planted retry (bugRetryTwice): a
// client that lost its identity, whose answers nobody waits for.
const forgetfulClient = 1 << 40

// appendRecord offers record id to the primary's next turn, as client
// clientID's append.
func (sh *shard) appendRecord(id int64, clientID uint64) {
	s := sh.s
	waiter := id
	if clientID == forgetfulClient {
		waiter = noop
	} else {
		s.recs[id].at = sh.id
	}
	sh.queue = append(sh.queue, core.Append[int64]{Waiter: waiter, Entry: segment.Entry{ClientID: clientID, Seq: uint64(id) + 1}})
	if sh.turnArmed {
		return
	}
	sh.turnArmed = true
	s.after(s.uniform(turnDelayMin, turnDelayMax), sh.turn)
}

// turn is one turn of the primary's loop: admit the batch, send it to the
// backup, store it, carry out the output.
func (sh *shard) turn() {
	sh.turnArmed = false
	p := sh.primary()
	if !p.up || len(sh.queue) == 0 {
		return // a crash took the batch: its clients resolve it
	}
	if p.paused() {
		return // the batch waits for the primary to run again (resume)
	}
	batch := sh.queue
	sh.queue = nil
	var out core.Output[int64]
	p.r.Propose(batch, &out)
	for _, b := range out.Replicate {
		sh.replicate(b)
	}
	out.Replicate = out.Replicate[:0]
	p.r.Store(&out)
	sh.carry(p, &out)
}

// replicate sends a batch to every backup on its replication stream, in
// the primary's configuration. The entries are the core's buffer: they
// are copied, as the storage server encodes them.
func (sh *shard) replicate(b core.Batch) {
	p := sh.primary()
	bks := sh.backups()
	if len(bks) == 0 {
		return
	}
	entries := slices.Clone(b.Entries)
	for _, bk := range bks {
		sh.replicateTo(p, bk, p.r.Epoch(), b.First, entries)
	}
}

// replicateTo sends one batch from primary p to backup bk.
func (sh *shard) replicateTo(p, bk *copyOf, epoch, first uint64, entries []segment.Entry) {
	s := sh.s
	pinc, binc := p.inc, bk.inc
	if sh.severed(p, bk) {
		return // the partition between them drops it
	}
	s.at(bk.repl.arrival(s.now, s.netDelay()), bk.receive(func() {
		if !bk.up || bk.inc != binc || p.inc != pinc || sh.severed(p, bk) {
			return // either end restarted, or a partition: the stream broke
		}
		advanced, err := bk.r.Replicated(epoch, first, entries)
		if err != nil {
			s.tracef("shard %d: backup %s: %v", sh.id, bk.name(), err)
			return
		}
		if s.sc.sync == syncGroup {
			// The batch counts once a fsync covers it; a fsync that
			// ended before the core heard of it counts here.
			if advanced {
				s.stats.raisedInReplicated++
				if s.plant == bugAckOnlySynced {
					s.planted = true
				} else {
					sh.ack(bk, p)
				}
			}
			bk.unsynced()
			return
		}
		held := bk.r.Durable()
		bk.unsynced()
		s.after(s.uniform(diskDelayMin, diskDelayMax), bk.receive(func() {
			if !bk.up || bk.inc != binc {
				return
			}
			sh.sendAck(bk, p, epoch, held)
		}))
	}))
}

// ack acknowledges backup bk's durable length to its primary p now.
func (sh *shard) ack(bk, p *copyOf) {
	sh.sendAck(bk, p, bk.r.Epoch(), bk.r.Durable())
}

// sendAck sends primary p backup bk's acknowledgement that it holds held
// entries in configuration epoch, on bk's replication stream.
func (sh *shard) sendAck(bk, p *copyOf, epoch, held uint64) {
	s := sh.s
	bk.ackSent, bk.ackEpoch = held, epoch
	pinc := p.inc
	s.at(bk.acks.arrival(s.now, s.netDelay()), p.receive(func() {
		if p.up && p.inc == pinc && !sh.severed(p, bk) {
			sh.acked(p, bk, epoch, held)
		}
	}))
}

// join asks every backup of primary p's configuration to join it, as a
// storage server's primary does on each new configuration (a new
// replication stream per backup): each answers how much it holds and the
// entries it holds past p's log, and p goes on once all of them answered.
func (sh *shard) join(p *copyOf) {
	s := sh.s
	epoch, tailFrom := p.r.Epoch(), p.log.Len()
	pinc := p.inc
	for _, bk := range sh.backups() {
		binc := bk.inc
		if sh.severed(p, bk) {
			bk.refusedIn = epoch
			continue
		}
		s.at(bk.repl.arrival(s.now, s.netDelay()), bk.receive(func() {
			if !bk.up || bk.inc != binc || p.inc != pinc || sh.severed(p, bk) {
				return // the stream broke: a crash report takes bk out
			}
			length, held, err := bk.r.Join(epoch)
			if err != nil {
				s.tracef("shard %d: %s refuses the join of configuration %d: %v", sh.id, bk.name(), epoch, err)
				bk.refusedIn = epoch
				return
			}
			bk.ackSent, bk.ackEpoch = held, epoch
			tail, ok := readEntries(bk.log, tailFrom, length)
			if !ok {
				s.errorf("shard %d: %s cannot read its tail [%d, %d) for a join", sh.id, bk.name(), tailFrom, length)
				return
			}
			s.at(bk.acks.arrival(s.now, s.netDelay()), p.receive(func() {
				if !p.up || p.inc != pinc || sh.severed(p, bk) {
					return
				}
				var out core.Output[int64]
				p.r.BackupJoined(bk.server, epoch, length, held, tailFrom, tail, s.now, &out)
				s.stats.joins++
				sh.carry(p, &out)
				sh.tick()
			}))
		}))
	}
}

// resend sends backup rs.Backup the entries [rs.From, rs.To) of primary
// c's log, which it lacks after joining.
func (sh *shard) resend(c *copyOf, rs core.Resend) {
	i := slices.IndexFunc(sh.copies, func(o *copyOf) bool { return o.server == rs.Backup })
	if i < 0 {
		return
	}
	entries, ok := readEntries(c.log, rs.From, rs.To)
	if !ok {
		sh.s.errorf("shard %d: %s cannot read [%d, %d) to resend", sh.id, c.name(), rs.From, rs.To)
		return
	}
	sh.replicateTo(c, sh.copies[i], c.r.Epoch(), rs.From, entries)
}

// acked takes backup bk's acknowledgement, in configuration epoch, that
// it holds held entries.
func (sh *shard) acked(p, bk *copyOf, epoch, held uint64) {
	advanced, step := p.r.BackupAcked(bk.server, epoch, held)
	if sh.s.plant == bugDurableOnOneBackup {
		// The first backup's word counts for all of them.
		for _, o := range sh.backups() {
			a, st := p.r.BackupAcked(o.server, epoch, held)
			advanced, step = advanced || a, step || st
		}
	}
	if !advanced {
		return
	}
	sh.noteDurable()
	sh.sendReport()
	if step {
		// The mode streams and reports durable entries: wake the feed
		// and the primary's loop, as the storage server does.
		sh.feed.changed()
		sh.tick()
	}
}

// tick runs the primary's ordering now: fills, reports, its timer.
func (sh *shard) tick() {
	p := sh.primary()
	if !p.running() {
		return
	}
	var out core.Output[int64]
	p.r.Tick(sh.s.now, &out)
	sh.carry(p, &out)
}

// lagFix takes a lag-fix from the leader.
func (sh *shard) lagFix(target uint64) {
	p := sh.primary()
	if !p.running() {
		return // a paused primary's lag-fix stream waits; the leader asks again
	}
	var out core.Output[int64]
	p.r.LagFix(sh.s.now, target, &out)
	sh.s.tracef("shard %d: lag-fix to %d: %d no-ops (stored %d)", sh.id, target, out.Noops, p.log.Len())
	sh.carry(p, &out)
}

// carry carries out a core's output, in the order of its fields.
func (sh *shard) carry(c *copyOf, out *core.Output[int64]) {
	s := sh.s
	for _, rs := range out.Resend {
		sh.resend(c, rs)
	}
	for _, b := range out.Replicate {
		sh.replicate(b)
	}
	if out.Unsynced {
		c.unsynced()
	}
	if out.Failed != nil {
		s.errorf("shard %d %s: %v", sh.id, c.name(), out.Failed)
	}
	for _, p := range out.Problems {
		s.tracef("shard %d %s: %v", sh.id, c.name(), p)
	}
	if c.r.Role() == core.RolePrimary {
		sh.mirror()
		if out.Stored > 0 {
			s.stats.records += out.Stored
		}
		if out.Noops > 0 {
			s.stats.noops += out.Noops
			s.stats.noopRuns++
		}
	}
	if len(out.Answers) > 0 {
		sh.answer(slices.Clone(out.Answers))
	}
	if out.Durable {
		sh.noteDurable()
		if c == sh.primary() && c.r.ActsOnDurable() && !sh.tickArmed {
			// A primary without backups holds what it wrote durably at
			// once: its mode acts on that at its next step, as the
			// storage server's loop steps after every batch.
			sh.tickArmed = true
			s.after(0, func() {
				sh.tickArmed = false
				sh.tick()
			})
		}
	}
	if out.Durable || out.Report {
		sh.sendReport()
	}
	if out.Changed {
		sh.feed.changed()
	}
	if at := out.WakeAt; !at.IsZero() && c == sh.primary() && (c.wakeAt.IsZero() || at.Before(c.wakeAt)) {
		c.wakeAt = at
		inc := c.inc
		s.at(at, func() {
			if c.inc == inc && c.wakeAt.Equal(at) {
				c.wakeAt = time.Time{}
				sh.tick()
			}
		})
	}
}

// mirror copies what the primary stored since the last call into the
// simulator's truth.
func (sh *shard) mirror() {
	p := sh.primary()
	n := uint64(len(sh.log))
	if l := p.log.Len(); l > n {
		ids, ok := readIDs(p.log, n, l)
		if !ok {
			sh.s.errorf("shard %d: the primary's log lacks [%d, %d)", sh.id, n, l)
			return
		}
		for _, e := range ids {
			if e != noop {
				sh.records++
			}
		}
		sh.log = append(sh.log, ids...)
	}
}

// noteDurable records what the primary holds durably.
func (sh *shard) noteDurable() {
	if p := sh.primary(); p.r.Role() == core.RolePrimary {
		sh.durable = max(sh.durable, p.r.Durable())
	}
}

// unsynced syncs the copy's log as the sync policy says.
func (c *copyOf) unsynced() {
	s := c.sh.s
	if s.plant == bugSkipSync {
		s.planted = true
		return
	}
	if s.plant == bugBackupSkipsSync && c.r.Role() == core.RoleBackup {
		s.planted = true
		return
	}
	if s.sc.sync == syncAlways {
		if err := c.log.Sync(); err != nil {
			s.errorf("shard %d %s: sync: %v", c.sh.id, c.name(), err)
		}
		return
	}
	if s.sc.sync == syncGroup {
		c.groupCommit()
		return
	}
	if c.syncArmed {
		return
	}
	c.syncArmed = true
	inc := c.inc
	s.after(s.sc.syncEvery, func() {
		if c.inc != inc {
			return
		}
		c.syncArmed = false
		if c.up {
			_ = c.log.Sync()
		}
	})
}

// groupCommit runs a group commit's fsync for the writes so far, or has
// the next one cover them if one runs: the fsync takes a disk delay, and
// its end reaches the core a moment later.
func (c *copyOf) groupCommit() {
	s := c.sh.s
	if c.syncArmed {
		c.syncAgain = true
		return
	}
	c.syncArmed = true
	inc := c.inc
	s.after(s.uniform(diskDelayMin, diskDelayMax), c.receive(func() {
		if c.inc != inc {
			return
		}
		c.syncArmed = false
		if !c.up {
			return
		}
		if err := c.log.Sync(); err != nil {
			s.errorf("shard %d %s: sync: %v", c.sh.id, c.name(), err)
			return
		}
		s.after(s.uniform(0, diskDelayMax), c.receive(func() {
			if c.inc == inc && c.up {
				c.synced()
			}
		}))
		if c.syncAgain {
			c.syncAgain = false
			c.groupCommit()
		}
	}))
}

// synced tells copy c's core that a fsync ended, and passes on a raise of
// its durable length as the storage server does: a backup acknowledges
// it, a primary reports it (and its mode may act on it). Then it checks
// that a backup's primary was told everything the backup holds durably
// (once a primary joined it in its configuration: before, nobody listens):
// a raise that no core call said it made is never acknowledged, and
// without later writes its entries are never ordered (the hang of a
// backup whose group commit's fsync ended inside Replicated).
func (c *copyOf) synced() {
	sh := c.sh
	advanced, step := c.r.Synced()
	if advanced {
		switch c.r.Role() {
		case core.RoleBackup:
			if p := sh.primary(); p != c {
				sh.ack(c, p)
			}
		case core.RolePrimary:
			if c == sh.primary() {
				sh.noteDurable()
				sh.sendReport()
				if step {
					sh.feed.changed()
					sh.tick()
				}
			}
		}
	}
	// A backup that a newer configuration made primary, before it heard
	// so, has no primary to acknowledge to (spec seed 8785: a backup
	// paused while its primary crashed took over, and on resuming met a
	// fsync's notice before the configuration).
	if c.r.Role() == core.RoleBackup && sh.primary() != c && c.ackEpoch == c.r.Epoch() && c.r.Durable() > c.ackSent {
		sh.s.errorf("shard %d: backup %s holds %d entries durably but acknowledged %d: no core call said its durable length moved", sh.id, c.name(), c.r.Durable(), c.ackSent)
	}
}

// checkSynced checks, as a cut orders shard sh's entries below end, what
// the durable default promises: every copy in the shard's configuration
// fsynced them before they counted as durable, so a power loss of every
// server keeps them. (A crashed copy kept only what it synced anyway.)
func (sh *shard) checkSynced(cut, end uint64) {
	s := sh.s
	if !s.sc.sync.durable() {
		return // the opt-out's documented risk
	}
	for i, c := range sh.copies {
		if !sh.member[i] || !c.up || c.crashed {
			continue
		}
		if n, synced := c.log.Len(), c.log.SyncedLen(); n >= end && synced < end {
			s.errorf("invariant 1: cut %d orders shard %d's entries below %d, which %s holds but fsynced only below %d", cut, sh.id, end, c.name(), synced)
		}
	}
}

// answer sends a core's answers to the appends' clients (one message
// for all: the simulator spares itself an event per answer).
func (sh *shard) answer(as []core.Answer[int64]) {
	s := sh.s
	s.after(s.netDelay(), func() {
		for _, a := range as {
			s.onAnswer(sh, a)
		}
	})
}

// onState is a storage server hearing of an applied change: every copy
// that is up applies the cuts and the finalization; then the primary
// acts, and the subscription feed streams what its mode streams.
func (sh *shard) onState(ev control.Event, snap *control.State) {
	s := sh.s
	if snap.Spec != nil {
		// Like the storage server's feed, every stream carries each view
		// change of the state it has not carried yet, before what
		// follows: a shard registered after a view change carries it too.
		for _, v := range snap.Spec.Void {
			if v.View <= sh.view {
				continue
			}
			sh.view = v.View
			// A failed shard's copies that are up still stream what cuts
			// placed (specStream.servePlaced), after the view change.
			vc := &viewMsg{view: v.View, cgp: v.ConfirmedGP, failed: v.Shard}
			sh.broadcast(func(m *subMsg) { m.views = append(m.views, vc) })
		}
	}
	cuts := ev.Cuts
	if len(cuts) == 0 && ev.Cut != nil {
		cuts = []cut.Cut{*ev.Cut}
	}
	var mine []shardCut
	for _, c := range cuts {
		if c.Index <= sh.knownCut.Index {
			continue
		}
		mine = append(mine, shardCut{c: c, slice: sliceOf(sh.knownCut, c, sh.id)})
		sh.knownCut = c
	}
	row := snap.Shard(sh.id)
	if row != nil && row.State == control.Finalized && !sh.finalized {
		sh.finalized, sh.finalLen = true, row.FinalLength
	}
	// What the event tells a copy of the windows (none, in eager cuts
	// between windows, when eager).
	var windows []fixante.Window
	windowed, eager := snap.Spec != nil, false
	if windowed {
		windows, eager = slices.Clone(snap.Spec.Windows), snap.Spec.Eager()
		sh.eager = eager
	}
	failedAt, final, finalLen := uint64(math.MaxUint64), sh.finalized, sh.finalLen
	if row != nil && row.Failed && row.State == control.Finalized {
		failedAt = row.FinalLength
	}
	for _, c := range sh.copies {
		if !c.up {
			continue
		}
		// A paused server's watch stream holds the event until it runs.
		inc := c.inc
		c.receive(func() {
			if c.inc != inc {
				return
			}
			var out core.Output[int64]
			if f, ok := c.ord.(core.WindowFollower); ok && windowed {
				f.SetWindows(windows, eager)
			}
			for _, m := range mine {
				// As a storage server does: a failed shard's slots past its
				// final length are no-ops no copy holds (speculative mode).
				sl := m.slice
				if sl.LocalStart+sl.Count > failedAt {
					sl.Count = failedAt - min(failedAt, sl.LocalStart)
				}
				c.r.ApplyCut(core.Cut{Index: m.c.Index, Start: m.c.Start, End: m.c.End, Slice: sl}, &out)
			}
			if final {
				c.r.Finalize(finalLen, &out)
			}
			sh.carry(c, &out)
		})()
	}
	if row != nil {
		for i, c := range sh.copies {
			sh.pending[i] = slices.ContainsFunc(row.Replicas, func(r control.Replica) bool { return c.namedBy(r) && r.Pending })
		}
	}
	if row != nil && !sh.finalized && row.Epoch > sh.epoch {
		sh.reconfigure(row, snap)
	}
	sh.primaryDiesOnJoin()
	if len(mine) > 0 {
		sh.checkMembersHoldOrdered()
	}
	if sh.finalized {
		sh.accepting = false
		sh.resolve()
	}
	if sh.alive || s.servesAfterFailure() {
		sh.feed.onState(ev, snap, mine)
	} else if x, ok := sh.feed.(*specStream); ok {
		x.servePlaced()
	}
	sh.tick()
}

// reconfigure hands each copy that is up its place in the shard's new
// configuration row, as a storage server does on the event: a backup left
// alone becomes primary, a copy left out is fenced. The truth follows the
// new primary, and the clients re-send, under their sequence numbers, the
// appends the old one never answered.
func (sh *shard) reconfigure(row *control.Shard, snap *control.State) {
	s := sh.s
	sh.epoch = row.Epoch
	old := sh.prim
	for i, c := range sh.copies {
		was := sh.member[i]
		sh.member[i] = slices.ContainsFunc(row.Replicas, c.namedBy)
		// A configuration that names an earlier run of the server does
		// not leave its copy out: no other copy replaced its tail.
		if !c.named(row) && !c.leftOut {
			c.leftOut, c.leftOutAfter = true, sh.knownCut.Index
		}
		if sh.member[i] && !was {
			c.leftOut = false
			sh.checkRejoined(c, snap.LastCut.Len(sh.id))
		}
		if row.Replicas[0].ID == c.server {
			sh.prim = i
		}
	}
	s.tracef("shard %d: configuration %d: %v", sh.id, row.Epoch, row.Replicas)
	var windows []fixante.Window
	windowed, eager := snap.Spec != nil, false
	if windowed {
		windows, eager = slices.Clone(snap.Spec.Windows), snap.Spec.Eager()
	}
	var joining *copyOf
	for i, c := range sh.copies {
		if !c.up {
			continue
		}
		m := core.Membership{Epoch: row.Epoch, Role: core.RoleFenced}
		named := c.named(row)
		switch {
		case i == sh.prim:
			m.Role = core.RolePrimary
			for _, r := range row.Replicas[1:] {
				m.Backups = append(m.Backups, r.ID)
			}
		case named:
			m.Role = core.RoleBackup
		}
		// As a storage server tells its copies.
		m.EarlierRun = named && !sh.member[i]
		// A paused server hears of the configuration once it runs again,
		// after what reached it before (see pause.go).
		late, inc := c.paused(), c.inc
		c.receive(func() {
			if c.inc != inc {
				return
			}
			promoted := m.Role == core.RolePrimary && c.r.Role() == core.RoleBackup
			if promoted {
				c.ord = s.md.NewShardOrdering(sh.id, c.log.Ordered(), s.now)
				if f, ok := c.ord.(core.WindowFollower); ok && windowed {
					f.SetWindows(windows, eager)
				}
				m.Ordering = c.ord
			}
			if c.r.Role() == core.RoleRecovered && m.Role == core.RoleFenced && s.plant == bugTrustReplacedTail {
				s.planted = true
				return
			}
			var out core.Output[int64]
			applied := c.r.Reconfigure(m, s.now, &out)
			sh.carry(c, &out)
			sh.maybeRejoin(c)
			switch {
			case !applied || m.Role != core.RolePrimary:
			case !late:
				if len(m.Backups) > 0 {
					joining = c
				}
			default:
				if promoted && c == sh.primary() {
					sh.tookOver(sh.knownCut.Len(sh.id))
				}
				if len(m.Backups) > 0 {
					sh.join(c)
				}
			}
		})()
	}
	if joining != nil {
		// Once the truth follows the new configuration: a join may adopt
		// a backup's tail.
		defer sh.join(joining)
	}
	p := sh.primary()
	if sh.prim == old || !p.up || p.r.Role() != core.RolePrimary {
		return // no failover, or none that serves: a new primary that is down or paused
	}
	sh.tookOver(snap.LastCut.Len(sh.id))
}

// tookOver follows a failover to the shard's new primary, which holds the
// ordered entries below ordered: the truth becomes its log, and the
// clients re-send the appends nobody answered.
func (sh *shard) tookOver(ordered uint64) {
	s := sh.s
	p := sh.primary()
	s.stats.failovers++
	if from, void := s.voidFrom[sh.id]; void {
		// The shard failed whole before this primary (paused) took
		// over: cuts order no-ops of the new view from its void point.
		ordered = min(ordered, from)
	}
	// Nothing past the new primary's log was ever durable, so no cut
	// ordered it: the new primary's entries replace it.
	if n := p.log.Len(); uint64(len(sh.log)) > n {
		if ordered > n {
			s.errorf("invariant 1: shard %d: the new primary holds %d entries, but %d are ordered", sh.id, n, ordered)
		}
		sh.log = sh.log[:n]
		sh.records = 0
		for _, e := range sh.log {
			if e != noop {
				sh.records++
			}
		}
	}
	sh.mirror()
	sh.noteDurable()
	sh.retryUnanswered()
	sh.tick()
}

// retryUnanswered re-sends the appends to the shard nobody answered, as
// the clients do once the shard table names a new primary.
func (sh *shard) retryUnanswered() {
	s := sh.s
	for id := range s.recs {
		if r := &s.recs[id]; r.at == sh.id && !r.acked && !r.rerouting {
			s.stats.retries++
			sh.appendRecord(int64(id), clientIDOf(r.client))
		}
	}
}

// sliceOf returns shard id's part of cut c after prev.
func sliceOf(prev, c cut.Cut, id cut.ShardID) cut.Slice {
	parts, err := cut.Interleave(prev, c)
	if err != nil {
		panic("sim: " + err.Error())
	}
	for _, p := range parts {
		if p.Shard == id {
			return p
		}
	}
	return cut.Slice{Shard: id}
}

// resolve settles the appends a finalized shard's primary never answered
// (its server crashed or failed): their clients ask the shard's copies
// which of them were ordered (the storage server's Resolve, the core's
// rule), and ask again while no copy can tell.
func (sh *shard) resolve() {
	s := sh.s
	if p := sh.primary(); sh.resolved || (p.up && p.r.Role() == core.RolePrimary) {
		return // done, or the primary answers (Finalize abandons the rest)
	}
	sh.resolved = true
	sh.queue = nil
	var ids []int64
	for id := range s.recs {
		if r := &s.recs[id]; r.at == sh.id && !r.acked && !r.rerouting {
			ids = append(ids, int64(id))
		}
	}
	sh.resolveIDs(ids)
}

// resolveRetryEvery is how soon a client asks again when no copy could
// resolve its append.
const resolveRetryEvery = 10 * time.Millisecond

func (sh *shard) resolveIDs(ids []int64) {
	s := sh.s
	held := make([]map[core.AppendID]uint64, len(sh.copies))
	for i, c := range sh.copies {
		if c.running() {
			// As a storage server answers Resolve.
			held[i], _ = core.Holdings(c.log, func(core.AppendID) bool { return true })
		}
	}
	var pending []int64
	for _, id := range ids {
		r := &s.recs[id]
		if r.at != sh.id || r.acked || r.rerouting {
			continue // an answer or another shard settled it
		}
		k := core.AppendID{Client: clientIDOf(r.client), Seq: uint64(id) + 1}
		res, pos := core.ResolvePending, uint64(0)
		for i, c := range sh.copies {
			if held[i] == nil {
				continue
			}
			local, found := held[i][k]
			if res, pos = c.r.Resolve(local, found); res != core.ResolvePending {
				break
			}
		}
		switch res {
		case core.ResolveOrdered:
			s.tracef("shard %d resolves %s: ordered at %d", sh.id, r.name, pos)
			s.acked(id, pos)
		case core.ResolveNotOrdered:
			s.reroute(id)
		default:
			pending = append(pending, id)
		}
	}
	if len(pending) > 0 {
		s.after(resolveRetryEvery, func() { sh.resolveIDs(pending) })
	}
}

// sendReport sends the primary's report to the leader, late while
// straggling, lost while the leader cannot hear the shard.
func (sh *shard) sendReport() { sh.sendReportOf(sh.primary()) }

// sendReportOf sends the report of copy p, a primary as far as it knows
// (a paused one that resumed may not know yet that it was taken out).
func (sh *shard) sendReportOf(p *copyOf) {
	s := sh.s
	if !p.running() || !sh.alive {
		return
	}
	rep, ok := p.r.Report()
	if !ok {
		return
	}
	r := order.Report{Shard: sh.id, Epoch: rep.Epoch, Length: rep.Length, Records: rep.Records, Backlog: rep.Backlog}
	if s.now.Before(sh.deafUntil) || (s.faulty() && s.r.Float64() < s.sc.reportLoss) {
		s.stats.lostReports++
		return
	}
	delay := s.netDelay()
	if !s.now.Before(sh.straggleFrom) && s.now.Before(sh.straggleUntil) {
		delay += sh.straggleExtra
	}
	copies := 1
	if s.faulty() && s.r.Float64() < s.sc.reportDup {
		copies = 2 // resent on a reconnected heartbeat stream
	}
	server, inc := p.server, p.incarnation()
	for range copies {
		s.at(sh.report.arrival(s.now, delay), func() { s.ld.onReport(sh, server, inc, r) })
	}
}

// beat sends the heartbeat of copy c's server (a primary's also rides on
// its reports), lost while the leader cannot hear the shard.
func (sh *shard) beat(c *copyOf) {
	s := sh.s
	if !c.running() || s.now.Before(sh.deafUntil) {
		return
	}
	server, inc := c.server, c.incarnation()
	s.at(sh.report.arrival(s.now, s.netDelay()), func() { s.ld.onBeat(server, inc) })
}

// namedBy says r names this run of c's server. A configuration that names
// an earlier run does not take this one in (core.Membership.EarlierRun): a
// Join decided for the earlier run may commit after the server restarted,
// and this run, holding less, must not serve in it (spec seed 4403).
func (c *copyOf) namedBy(r control.Replica) bool {
	return r.ID == c.server && r.Incarnation == c.incarnation()
}

// named says row names c's server, in this run or an earlier one.
func (c *copyOf) named(row *control.Shard) bool {
	return slices.ContainsFunc(row.Replicas, func(r control.Replica) bool { return r.ID == c.server })
}

// incarnation is the incarnation c's server heartbeats with: the
// registration's 1, one more after each restart (the failure detector
// takes a member that comes back as another incarnation for failed).
func (c *copyOf) incarnation() uint64 { return uint64(c.inc) + 1 }

// heartbeat repeats the last report now and then, as a storage server's
// heartbeat does: a new leader learns the lengths from it, and the failure
// detector hears the server is alive.
func (sh *shard) heartbeat() {
	s := sh.s
	s.after(s.sc.heartbeat, func() {
		if !sh.alive || sh.finalized {
			return
		}
		sh.sendReport()
		// Every server that runs heartbeats, in a configuration or not,
		// as a storage server does: a restarted one that rejoins is
		// known as its new incarnation by then. A primary that has not
		// heard yet that it was taken out (a paused one) reports as well.
		for _, c := range sh.copies {
			sh.beat(c)
			if c != sh.primary() && c.r.Role() == core.RolePrimary {
				sh.sendReportOf(c)
			}
		}
		p := sh.primary()
		for _, bk := range sh.backups() {
			epoch := p.r.Epoch()
			if !p.running() || p.r.Role() != core.RolePrimary || s.now.Before(sh.deafUntil) ||
				!(sh.severed(p, bk) && !s.now.Before(sh.splitSeen) || bk.refusedIn == epoch) {
				continue
			}
			// The primary cannot replicate to this backup: its heartbeat
			// says so until the leader takes the backup out.
			server := bk.server
			s.at(sh.report.arrival(s.now, s.netDelay()), func() { s.ld.onUnreachable(sh.id, server, epoch) })
		}
		sh.heartbeat()
	})
}

// stream sends items to every subscriber; now and then a stream
// reconnects and repeats a stretch of what it sent before.
func (sh *shard) stream(items []spec.Item[int64]) {
	s := sh.s
	if len(items) == 0 {
		return
	}
	items = s.plantInStream(items)
	sh.hist = append(sh.hist, items...)
	if len(sh.hist) > histMax {
		sh.hist = slices.Clone(sh.hist[len(sh.hist)-histKeep:])
	}
	for i := range sh.streams {
		sh.send(i, func(m *subMsg) { m.items = append(m.items, items...) })
		if s.r.Float64() < s.sc.dupProb {
			s.stats.dupResends++
			back := min(len(sh.hist), 1+s.r.IntN(repeatMax))
			rep := slices.Clone(sh.hist[len(sh.hist)-back:])
			sh.send(i, func(m *subMsg) { m.items = append(m.items, rep...) })
		}
	}
}

// streamBatch sends an eager cut batch to every subscriber; now and then a
// stream reconnects and sends it again.
func (sh *shard) streamBatch(b *pb.CutBatch) {
	s := sh.s
	for i := range sh.streams {
		sh.send(i, func(m *subMsg) { m.batches = append(m.batches, b) })
		if s.r.Float64() < s.sc.dupProb {
			s.stats.dupResends++
			sh.send(i, func(m *subMsg) { m.batches = append(m.batches, b) })
		}
	}
}

// send adds to the next message of stream i: the one not yet delivered,
// or a new one. Like a storage server's next response, a message carries
// a view change, then the confirmed end, then entries.
func (sh *shard) send(i int, add func(*subMsg)) {
	s := sh.s
	st := sh.streams[i]
	if st.pending == nil {
		m := &subMsg{shard: sh.id}
		st.pending = m
		sb := s.subs[i]
		s.at(st.arrival(s.now, s.netDelay()), func() {
			if st.pending == m {
				st.pending = nil
			}
			sb.on(m)
		})
	}
	st.pending.view = max(st.pending.view, sh.view)
	add(st.pending)
}

func (sh *shard) broadcast(add func(*subMsg)) {
	for i := range sh.streams {
		sh.send(i, add)
	}
}

// fail stops the shard's primary server for good and cuts the backups'
// servers off from the leader: a whole-shard failure. The shard takes no
// appends, reports nothing and stops its heartbeats. Its backups stay up
// and, in a mode that serves after a failure, serve what was ordered.
func (sh *shard) fail() {
	p := sh.primary()
	sh.alive, sh.accepting = false, false
	p.up = false
	p.inc++
	sh.s.tracef("shard %d fails (stored %d, durable %d)", sh.id, len(sh.log), sh.durable)
}

// crash crashes copy c's server: its log keeps what was synced and keep
// more whole frames of the write in flight (a torn write); the shard
// fails (finalize-and-add: a surviving server reports it), and the server
// restarts after down with the copy read-only (RoleRecovered).
func (sh *shard) crash(c *copyOf, keep int, down time.Duration) {
	s := sh.s
	if !c.up {
		// Already down (a power loss takes a shard's servers, some may
		// have crashed before): crashing it again would schedule a second
		// restart, which would restart the copy over itself once it is
		// back and run a second catch-up beside the first.
		return
	}
	if c == sh.primary() && len(sh.queue) > 0 && s.sc.sync.durable() {
		// The turn that was writing the queued batch: its frames reach
		// the log unsynced, so the crash may keep or tear them.
		var es []segment.Entry
		for _, a := range sh.queue {
			es = append(es, a.Entry)
		}
		_, _ = c.log.Append(es)
	}
	before, synced := c.log.Len(), c.log.SyncedLen()
	if s.plant == bugSkipSync && synced < sh.durable {
		s.planted = true
	}
	if p := sh.primary(); s.plant == bugDurableOnOneBackup && (c == p || !p.up) {
		// The bug strikes when, the primary gone, no copy that serves
		// holds all the primary counted durable.
		held := uint64(0)
		for i, o := range sh.copies {
			if o != c && sh.serves(i) {
				held = max(held, o.log.Len())
			}
		}
		if held < sh.durable {
			s.planted = true
		}
	}
	c.log.CrashTorn(keep)
	if c.log.Len() < before {
		s.stats.lostTails++
	}
	c.up, c.crashed, c.syncArmed, c.syncAgain, c.wakeAt, c.repairing = false, true, false, false, time.Time{}, false
	c.pausedUntil, c.held = time.Time{}, nil
	c.inc++
	s.stats.crashes++
	s.tracef("shard %d: %s crashes (stored %d, synced %d, kept %d after the crash; durable %d)", sh.id, c.name(), before, synced, c.log.Len(), sh.durable)
	// A survivor serves in the configuration: a copy back from a crash is
	// read-only (RoleRecovered never rejoins in place), so it takes no
	// failover, and the shard has failed.
	survivor := sh.serving() > 0
	if survivor && !sh.survivesSplit() {
		// Only backups cut off from the primary survive, which the
		// leader is taking out (or took out, unheard of yet): whether
		// the crash report or that comes first, the shard may fail
		// whole.
		s.failedShards[sh.id] = true
	}
	switch {
	case sh.alive && survivor && s.plant != bugFinalizeOnReplicaFailure:
		// The survivors hold everything durable: the shard fails over to
		// them and keeps its id (a surviving server, or the failure
		// detector, reports the crash; one report names every server
		// that crashed at once).
		s.crashedReplicas[sh.id] = true
		if sh.reported = append(sh.reported, c.server); len(sh.reported) == 1 {
			s.after(crashReportDelay, func() {
				// Only servers of the configuration: a command that names
				// another is refused whole.
				var rm []string
				for _, id := range sh.reported {
					if i := slices.IndexFunc(sh.copies, func(o *copyOf) bool { return o.server == id }); sh.member[i] {
						rm = append(rm, id)
					}
				}
				sh.reported = nil
				if len(rm) > 0 {
					rc := control.ReconfigCommand{Shard: sh.id, Epoch: sh.epoch, Remove: rm}
					s.ld.operator(control.Command{Reconfig: &rc})
				}
			})
		}
	case sh.alive:
		if survivor {
			s.planted = true
			s.crashedReplicas[sh.id] = true
		} else {
			s.failedShards[sh.id] = true
		}
		sh.alive, sh.accepting = false, false
		s.after(crashReportDelay, func() {
			s.ld.operator(control.Command{Finalize: &control.FinalizeCommand{Shard: sh.id, Failed: true}})
			s.addReplacement()
		})
	}
	if sh.finalized {
		sh.resolve()
	}
	s.after(down, func() { sh.restart(c) })
}

// crashReportDelay is how soon a surviving server (or the failure
// detector of an ordering replica) reports a crashed one.
const crashReportDelay = 2 * time.Millisecond

// restart brings copy c's server back: the copy is what its log
// recovered, read-only; it applies the cuts it missed (its watch resumes)
// and serves what it holds.
func (sh *shard) restart(c *copyOf) {
	s := sh.s
	var last uint64
	if runs := c.log.Runs(0); len(runs) > 0 {
		last = runs[len(runs)-1].Cut
	}
	sh.damageOnRestart(c)
	c.r = core.NewReplica[int64](core.Config{ID: sh.id, Role: core.RoleRecovered, LastCut: last, HeldWhenSynced: s.sc.sync == syncGroup}, c.log)
	c.ord = nil
	c.up = true
	// A storage server heartbeats as it starts: the leader knows its new
	// incarnation before it can rejoin.
	sh.beat(c)
	s.tracef("shard %d: %s restarts read-only (%d entries, %d ordered, last cut %d)", sh.id, c.name(), c.log.Len(), c.log.Ordered(), last)
	var out core.Output[int64]
	// As a storage server replays the events: the configuration that left
	// this copy out comes between the cuts before it and those after.
	hearLeftOut := func() {
		if s.plant == bugTrustReplacedTail {
			s.planted = true
			return
		}
		c.r.Reconfigure(core.Membership{Epoch: sh.epoch, Role: core.RoleFenced}, s.now, &out)
	}
	heard := false
	var replayed []shardCut
	prev := s.initialCut
	for _, cc := range s.cutHist {
		if cc.Index > sh.knownCut.Index {
			break
		}
		if c.leftOut && !heard && cc.Index > c.leftOutAfter {
			heard = true
			hearLeftOut()
		}
		if cc.Index > last {
			sl := sliceOf(prev, cc, sh.id)
			c.r.ApplyCut(core.Cut{Index: cc.Index, Start: cc.Start, End: cc.End, Slice: sl}, &out)
			replayed = append(replayed, shardCut{c: cc, slice: sl})
		}
		prev = cc
	}
	if c.leftOut && !heard {
		hearLeftOut()
	}
	if sh.finalized {
		c.r.Finalize(sh.finalLen, &out)
	}
	sh.carry(c, &out)
	if s.servesAfterFailure() {
		sh.feed.replay(c, replayed)
	}
	sh.catchUp(c)
	sh.maybeRejoin(c)
}

// readEntries returns the entries of log at local [from, to), a no-op run
// cut to the range, or false if it cannot read them all.
func readEntries(log *core.MemLog, from, to uint64) ([]segment.Entry, bool) {
	if to <= from {
		return nil, true
	}
	var out []segment.Entry
	next := from
	err := log.Scan(from, func(local uint64, e segment.Entry) bool {
		if local != next {
			return false
		}
		if e.Noops > 0 {
			e.Noops = min(e.Noops, to-local)
		}
		out = append(out, e)
		next = local + max(e.Noops, 1)
		return next < to
	})
	return out, err == nil && next == to
}

// readIDs returns the record ids (noop for no-ops) at local [from, to) of
// log, or false if it does not hold them all.
func readIDs(log *core.MemLog, from, to uint64) ([]int64, bool) {
	if to <= from {
		return nil, true
	}
	out := make([]int64, 0, to-from)
	log.Scan(from, func(local uint64, e segment.Entry) bool {
		if local != from+uint64(len(out)) {
			return false
		}
		if e.Noops > 0 {
			for range min(e.Noops, to-local) {
				out = append(out, noop)
			}
		} else {
			out = append(out, int64(e.Seq)-1)
		}
		return uint64(len(out)) < to-from
	})
	return out, uint64(len(out)) == to-from
}

// plantInStream plants a swap or a drop in items, once.
func (s *cluster) plantInStream(items []spec.Item[int64]) []spec.Item[int64] {
	if s.planted || (s.plant != bugSwap && s.plant != bugDrop) || s.now.Before(s.start.Add(50*time.Millisecond)) {
		return items
	}
	var recs []int
	for i, it := range items {
		if it.Skip == 0 {
			recs = append(recs, i)
		}
	}
	switch {
	case s.plant == bugSwap && len(recs) >= 2:
		items = slices.Clone(items)
		a, b := recs[0], recs[1]
		items[a].Rec, items[b].Rec = items[b].Rec, items[a].Rec
	case s.plant == bugDrop && len(recs) >= 1:
		items = slices.Clone(items)
		items[recs[0]].Rec, items[recs[0]].Skip = 0, 1
	default:
		return items
	}
	s.planted = true
	s.tracef("planted %v in %+v", s.plant, items)
	return items
}
