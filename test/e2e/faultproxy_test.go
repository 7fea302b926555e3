package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/augur-log/augur/internal/config"
)

// The fault-injecting network of the fault campaign.
//
// Every server process gets its own cluster file (its "view"): it lists the
// process itself at its real listen address and every other server at the
// address of a proxy that belongs to the link from this process to that
// server. The test's clients get a view of their own (source clientSource).
// So every connection a process opens from its own cluster file crosses the
// link (source, destination), and the test can cut, stall one direction of,
// delay and heal each link on its own.
//
// What a link cannot express: addresses that one process hands to another.
// A shard's replica addresses are the ones its primary registered from its
// own view (its own real address and its links to its backups), and a
// leader hint names an address from the view of the replica that gave it.
// A client that appends to a primary therefore connects to the primary's
// real address, bypassing every proxy, and a client sent on by a hint uses
// the hinting replica's link. Faults between servers are exact; faults
// between clients and servers are only as exact as the addresses the
// cluster hands out.

// clientSource names the test's clients as the source of links.
const clientSource = "client"

// proxyChunk is how many bytes a proxy moves per read; small enough that a
// delay applies per message rather than per large batch.
const proxyChunk = 32 << 10

// direction of bytes on a link.
type direction int

const (
	forward  direction = iota // from the link's source to its destination
	backward                  // the answers, from destination to source
)

// link is the proxy of the connections from one process to another.
type link struct {
	src, dst string
	target   string // the destination's real listen address
	l        net.Listener

	mu sync.Mutex
	// cut resets every connection and every new one.
	cut bool
	// stalled holds one direction's bytes (or both) until healed; TCP
	// delivers them then, as it would after a partition heals.
	stalled [2]bool
	delay   time.Duration
	// changed is closed and replaced on every change of the state above,
	// waking the copiers that wait on a stall.
	changed chan struct{}
	conns   map[net.Conn]struct{}
}

func (k *link) String() string { return k.src + "->" + k.dst }

// state returns the link's state for direction d and a channel closed at
// its next change.
func (k *link) state(d direction) (cut, stalled bool, delay time.Duration, changed <-chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cut, k.stalled[d], k.delay, k.changed
}

// set changes the link's state under its lock and wakes its copiers.
func (k *link) set(f func()) {
	k.mu.Lock()
	f()
	close(k.changed)
	k.changed = make(chan struct{})
	var reset []net.Conn
	if k.cut {
		for c := range k.conns {
			reset = append(reset, c)
		}
	}
	k.mu.Unlock()
	for _, c := range reset {
		c.Close()
	}
}

func (k *link) serve() {
	for {
		c, err := k.l.Accept()
		if err != nil {
			return // the listener closed: the test is over
		}
		go k.handle(c)
	}
}

func (k *link) track(c net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cut {
		return false
	}
	k.conns[c] = struct{}{}
	return true
}

func (k *link) untrack(c net.Conn) {
	k.mu.Lock()
	delete(k.conns, c)
	k.mu.Unlock()
	c.Close()
}

func (k *link) handle(in net.Conn) {
	if !k.track(in) {
		in.Close()
		return
	}
	defer k.untrack(in)
	out, err := net.Dial("tcp", k.target)
	if err != nil {
		return // the destination is down: so is the connection
	}
	if !k.track(out) {
		out.Close()
		return
	}
	defer k.untrack(out)
	done := make(chan struct{}, 2)
	go func() { k.copy(out, in, forward); done <- struct{}{} }()
	go func() { k.copy(in, out, backward); done <- struct{}{} }()
	<-done // either side ended: end both
}

// copy moves bytes from src to dst, holding them while direction d is
// stalled and after waiting the link's delay.
func (k *link) copy(dst, src net.Conn, d direction) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, proxyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				cut, stalled, delay, changed := k.state(d)
				if cut {
					return // set closed the connections
				}
				if !stalled {
					if delay > 0 {
						time.Sleep(delay) // the fault itself, not synchronisation
					}
					break
				}
				<-changed
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: handle ends both sides
		}
	}
}

// faultNet is the links of a cluster: one per ordered pair of a source (a
// server or clientSource) and a destination server.
type faultNet struct {
	links map[[2]string]*link
}

func (n *faultNet) link(t *testing.T, src, dst string) *link {
	t.Helper()
	k := n.links[[2]string{src, dst}]
	if k == nil {
		t.Fatalf("no link %s->%s", src, dst)
	}
	return k
}

// between returns the links from each of as to each of bs and back.
func (n *faultNet) between(t *testing.T, as, bs []string) []*link {
	var out []*link
	for _, a := range as {
		for _, b := range bs {
			if a != b {
				out = append(out, n.link(t, a, b), n.link(t, b, a))
			}
		}
	}
	return out
}

// healAll restores every link.
func (n *faultNet) healAll() {
	for _, k := range n.links {
		k.set(func() { k.cut, k.stalled, k.delay = false, [2]bool{}, 0 })
	}
}

// cut resets every connection of the links and refuses new ones: a
// partition that the ends notice at once.
func cut(ks ...*link) {
	for _, k := range ks {
		k.set(func() { k.cut = true })
	}
}

// stall holds direction d of the links: their bytes wait in the proxy
// until healed, the ends see silence.
func stall(d direction, ks ...*link) {
	for _, k := range ks {
		k.set(func() { k.stalled[d] = true })
	}
}

// delay adds d before every chunk the links move, both ways.
func delay(d time.Duration, ks ...*link) {
	for _, k := range ks {
		k.set(func() { k.delay = d })
	}
}

// withFaultNet puts a proxy on every link of pc's cluster and gives each
// server (and the clients) its own cluster file, as described above. It
// must run before the servers start.
func withFaultNet(t *testing.T, pc *procCluster) *faultNet {
	t.Helper()
	n := &faultNet{links: map[[2]string]*link{}}
	ids := pc.ids()
	real := map[string]string{}
	for _, id := range ids {
		a, err := pc.cfg.Addr(id)
		if err != nil {
			t.Fatal(err)
		}
		real[id] = a
	}
	isReal := map[string]bool{}
	for _, a := range real {
		isReal[a] = true
	}
	// The servers' ports were free a moment ago (freeAddrs) and are not
	// taken yet: a proxy that lands on one is kept aside, so the kernel
	// hands out another, and closed at the end.
	var aside []net.Listener
	defer func() {
		for _, l := range aside {
			l.Close()
		}
	}()
	for _, src := range append([]string{clientSource}, ids...) {
		for _, dst := range ids {
			if src == dst {
				continue
			}
			var l net.Listener
			for l == nil {
				nl, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatalf("listen for link %s->%s: %v", src, dst, err)
				}
				if isReal[nl.Addr().String()] {
					aside = append(aside, nl)
				} else {
					l = nl
				}
			}
			k := &link{src: src, dst: dst, target: real[dst], l: l, changed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
			n.links[[2]string{src, dst}] = k
			go k.serve()
		}
	}
	t.Cleanup(func() {
		for _, k := range n.links {
			k.l.Close()
			k.set(func() { k.cut = true })
		}
	})
	dir := filepath.Dir(pc.cfgPath)
	pc.cfgPaths = map[string]string{}
	for _, src := range append([]string{clientSource}, ids...) {
		view := viewOf(pc.cfg, func(dst string) string {
			if dst == src {
				return real[dst]
			}
			return n.links[[2]string{src, dst}].l.Addr().String()
		})
		path := filepath.Join(dir, fmt.Sprintf("cluster-%s.yaml", src))
		if err := view.Save(path); err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(path); err != nil {
			t.Fatalf("the view of %s is invalid: %v", src, err)
		}
		if src == clientSource {
			pc.cfg = view
		} else {
			pc.cfgPaths[src] = path
		}
	}
	return n
}

// viewOf returns a copy of c with every server's address given by addr.
func viewOf(c *config.Cluster, addr func(id string) string) *config.Cluster {
	v := *c
	v.Ordering = append([]config.OrderingNode(nil), c.Ordering...)
	v.Storage = append([]config.StorageNode(nil), c.Storage...)
	for i := range v.Ordering {
		v.Ordering[i].Addr = addr(v.Ordering[i].ID)
	}
	for i := range v.Storage {
		v.Storage[i].Addr = addr(v.Storage[i].ID)
	}
	return &v
}
