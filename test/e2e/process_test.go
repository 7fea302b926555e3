// Package e2e holds augur's end-to-end tests. They drive whole clusters
// through the Go SDK and check the invariants of DESIGN.md: no acknowledged
// append is lost, every reader sees the same dense sequence, and the history
// of appends and reads is linearizable (checked with porcupine).
//
// TestProcessFaults builds cmd/augur once, runs 3 ordering replicas and 2
// storage groups of 2 servers as separate processes on loopback, and kill -9s
// the ordering leader and a group's primary under load (the primary's shard
// fails over to its backup). TestRollingRestart restarts every storage
// server in turn under load, with SIGTERM, then with kill -9, in eager and
// speculative mode, each back in its shards before the next stops:
//
//	go test ./test/e2e/ -run 'Process|RollingRestart' -v
//
// TestSpecProcess runs the same 7 processes in speculative mode: a burst, a
// shard added and removed, then a whole shard killed; two applications that
// roll back on fail_spec (SpecLog's Figure 6) end with the eager order:
//
//	go test ./test/e2e/ -run SpecProcess -v
//
// TestFaultCampaign puts a fault-injecting proxy on every link between the
// 7 processes and injects partitions, one-way stalls, slow links and
// SIGSTOPs; TestFullDisk and TestSlowDisk give one storage server a full
// or slow disk. docs/reliability.md lists them, how to run the long
// campaign (-e2e.campaign) and what the runs showed:
//
//	go test ./test/e2e/ -run 'FaultCampaign|FullDisk|SlowDisk' -v
//
// TestReconfig adds and finalizes shards under load in an in-process cluster:
//
//	go test ./test/e2e/ -run Reconfig -v
//
// Everything, with the race detector in the test process:
//
//	go test -race ./test/e2e/ -count=1 -v
//
// -short skips the real-process test. AUGUR_E2E_BUILDFLAGS adds flags to the
// build of the augur binary (for example "-race"). On failure each server's
// log tail is printed; the full logs are under the test's temporary directory.
package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/check"
	"github.com/augur-log/augur/internal/config"
)

// Workload and time bounds of TestProcessFaults.
const (
	procAppenders = 4
	// procAppendPace paces each appender; with procReadPace it keeps the
	// history at a few thousand operations, which porcupine checks quickly.
	procAppendPace  = 8 * time.Millisecond
	procReadPace    = 20 * time.Millisecond
	procReadTimeout = 10 * time.Second
	// procPhaseAcksMin is how many appends each phase (before the faults,
	// during them, after the restarts) must acknowledge.
	procPhaseAcksMin   = 150
	procPhaseMin       = 3 * time.Second
	procFailureTimeout = time.Second
	procReadyTimeout   = 20 * time.Second
	procPhaseTimeout   = 20 * time.Second
	// procDrainTimeout bounds the wait for appends in flight once the
	// appenders stop.
	procDrainTimeout   = 60 * time.Second
	procCatchUpTimeout = 30 * time.Second
	procStopTimeout    = 10 * time.Second
	procStatusTimeout  = 2 * time.Second
	procLogTailLines   = 40
)

// The augur binary, built once per test binary run on first use.
var (
	binDir  string
	binOnce sync.Once
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "augur-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// augurBinary builds cmd/augur once and returns its path.
func augurBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("find the go tool: %w", err)
			return
		}
		path := filepath.Join(binDir, "augur")
		args := []string{"build", "-o", path}
		args = append(args, strings.Fields(os.Getenv("AUGUR_E2E_BUILDFLAGS"))...)
		args = append(args, "github.com/augur-log/augur/cmd/augur")
		start := time.Now()
		out, err := exec.Command(goTool, args...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
			return
		}
		binPath = path
		t.Logf("built %s in %v", path, time.Since(start).Round(time.Millisecond))
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one server process; a restart replaces its cmd.
type proc struct {
	id      string
	logPath string
	cmd     *exec.Cmd
	// exited is closed once cmd returned from Wait; waitErr is then set.
	exited  chan struct{}
	waitErr error
	// expected is set before the test itself kills or stops the process.
	expected bool
}

// procCluster runs every server of a cluster file as its own process.
type procCluster struct {
	t       *testing.T
	bin     string
	cfgPath string
	cfg     *config.Cluster
	logDir  string
	// env, when set, returns environment variables to add for server id.
	env func(id string) []string
	// cfgPaths, when set, gives a server its own cluster file (see
	// withFaultNet); the others read cfgPath.
	cfgPaths map[string]string

	mu    sync.Mutex
	procs map[string]*proc
}

// freeAddrs returns n distinct loopback addresses that were free a moment ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var ls []net.Listener
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return addrs
}

// newProcCluster writes a cluster file for 3 ordering replicas and groups a
// and b of 2 storage servers each, with the given ordering interval, fsync
// interval and the settings in extra (YAML lines); it starts nothing.
func newProcCluster(t *testing.T, bin string, interval time.Duration, extra string) *procCluster {
	t.Helper()
	return newProcClusterSettings(t, bin, interval, "fsync: interval\n"+extra)
}

// newProcClusterSettings is newProcCluster with only the settings given
// (YAML lines) beyond the shape, so the others take their defaults.
func newProcClusterSettings(t *testing.T, bin string, interval time.Duration, settings string) *procCluster {
	t.Helper()
	return newProcClusterShape(t, bin, interval, settings, procShape{groupServers: config.DefaultGroupServers})
}

// procShape is the servers of a test cluster beyond its 3 ordering
// replicas: storage groups a and b of groupServers each, and sequencing
// replicas (mode lazy).
type procShape struct {
	groupServers, sequencing int
}

// procGroups are the storage groups of every test cluster.
var procGroups = []string{"a", "b"}

// newProcClusterShape writes the cluster file of shape with the ordering
// interval, the failure timeout procFailureTimeout and the settings given
// (YAML lines); it starts nothing. Servers are named o1-o3, a1, a2, ...,
// b1, b2, ... and q1, q2, ...
func newProcClusterShape(t *testing.T, bin string, interval time.Duration, settings string, shape procShape) *procCluster {
	t.Helper()
	dir := t.TempDir()
	addrs := freeAddrs(t, 3+len(procGroups)*shape.groupServers+shape.sequencing)
	next := func() string {
		a := addrs[0]
		addrs = addrs[1:]
		return a
	}
	// Every connection is TLS, with certificates from augur certs init:
	// the secure path is the tested one.
	var b strings.Builder
	fmt.Fprintf(&b, "cluster_id: e2e\ntls: {dir: %s, client: admin}\n%sordering_interval: %v\nfailure_timeout: %v\ndata_dir: %s\nordering:\n",
		filepath.Join(dir, "certs"), settings, interval, procFailureTimeout, filepath.Join(dir, "data"))
	for i := range 3 {
		fmt.Fprintf(&b, "  - {id: o%d, addr: %s}\n", i+1, next())
	}
	b.WriteString("storage:\n")
	for _, g := range procGroups {
		for i := range shape.groupServers {
			fmt.Fprintf(&b, "  - {id: %s%d, group: %s, addr: %s}\n", g, i+1, g, next())
		}
	}
	if shape.sequencing > 0 {
		b.WriteString("sequencing:\n")
		for i := range shape.sequencing {
			fmt.Fprintf(&b, "  - {id: q%d, addr: %s}\n", i+1, next())
		}
	}
	return writeProcCluster(t, bin, dir, b.String())
}

// writeProcCluster writes yaml as dir's cluster file, issues its
// certificates with augur certs init, and returns the cluster of
// processes it describes, none started yet.
func writeProcCluster(t *testing.T, bin, dir, yaml string) *procCluster {
	t.Helper()
	cfgPath := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the test's cluster file is invalid: %v\n%s", err, yaml)
	}
	if out, err := exec.Command(bin, "certs", "init", "--config", cfgPath).CombinedOutput(); err != nil {
		t.Fatalf("augur certs init: %v\n%s", err, out)
	}
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &procCluster{t: t, bin: bin, cfgPath: cfgPath, cfg: cfg, logDir: logDir, procs: map[string]*proc{}}
}

func (pc *procCluster) ids() []string {
	var ids []string
	for _, o := range pc.cfg.Ordering {
		ids = append(ids, o.ID)
	}
	for _, s := range pc.cfg.Storage {
		ids = append(ids, s.ID)
	}
	for _, q := range pc.cfg.Sequencing {
		ids = append(ids, q.ID)
	}
	return ids
}

// start starts (or restarts) server id; its stdout and stderr go to its log
// file, which a restart appends to.
func (pc *procCluster) start(id string) {
	pc.t.Helper()
	path := pc.cfgPath
	if p, ok := pc.cfgPaths[id]; ok {
		path = p
	}
	pc.startArgs(id, "server", "--config", path, "--id", id, "--log-level", "info")
}

// startArgs starts (or restarts) process id running the augur binary with
// args; its output goes to id's log file like a server's.
func (pc *procCluster) startArgs(id string, args ...string) {
	t := pc.t
	t.Helper()
	logPath := filepath.Join(pc.logDir, id+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== e2e: starting %s at %s ===\n", id, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(pc.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if pc.env != nil {
		cmd.Env = append(os.Environ(), pc.env(id)...)
	}
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", id, err)
	}
	p := &proc{id: id, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.waitErr = err
		close(p.exited)
	}()
	pc.mu.Lock()
	pc.procs[id] = p
	pc.mu.Unlock()
}

func (pc *procCluster) proc(id string) *proc {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.procs[id]
}

// sigterm sends SIGTERM to server id and waits until it exited.
func (pc *procCluster) sigterm(id string) {
	t := pc.t
	t.Helper()
	p := pc.proc(id)
	if p == nil {
		t.Fatalf("stop %s: never started", id)
	}
	pc.mu.Lock()
	p.expected = true
	pc.mu.Unlock()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", id, err)
	}
	select {
	case <-p.exited:
	case <-time.After(procStopTimeout):
		t.Fatalf("%s did not exit within %v of SIGTERM", id, procStopTimeout)
	}
}

// kill9 sends SIGKILL to server id and waits until it is gone.
func (pc *procCluster) kill9(id string) {
	t := pc.t
	t.Helper()
	p := pc.proc(id)
	if p == nil {
		t.Fatalf("kill %s: never started", id)
	}
	pc.mu.Lock()
	p.expected = true
	pc.mu.Unlock()
	if err := p.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatalf("kill -9 %s: %v", id, err)
	}
	select {
	case <-p.exited:
	case <-time.After(procStopTimeout):
		t.Fatalf("%s did not die within %v of SIGKILL", id, procStopTimeout)
	}
}

// checkAlive fails the test for every server that exited on its own.
func (pc *procCluster) checkAlive() {
	t := pc.t
	t.Helper()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, id := range pc.ids() {
		p := pc.procs[id]
		if p == nil || p.expected {
			continue
		}
		select {
		case <-p.exited:
			t.Errorf("server %s exited unexpectedly: %v (log: %s)", id, p.waitErr, p.logPath)
			p.expected = true // report once
		default:
		}
	}
}

// startAll starts every server; when the test ends, it stops them and, if
// the test failed, prints their logs.
func (pc *procCluster) startAll() {
	t := pc.t
	t.Cleanup(func() {
		if t.Failed() {
			pc.printLogs()
		}
	})
	t.Cleanup(pc.stopAll)
	for _, id := range pc.ids() {
		pc.start(id)
	}
}

// stopAll sends SIGTERM to every running server and waits for it to exit,
// falling back to SIGKILL.
func (pc *procCluster) stopAll() {
	t := pc.t
	pc.mu.Lock()
	var running []*proc
	for _, p := range pc.procs {
		select {
		case <-p.exited:
		default:
			p.expected = true
			running = append(running, p)
		}
	}
	pc.mu.Unlock()
	for _, p := range running {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(procStopTimeout)
	defer deadline.Stop()
	for _, p := range running {
		select {
		case <-p.exited:
			if p.waitErr != nil {
				t.Logf("server %s exited after SIGTERM with %v", p.id, p.waitErr)
			}
		case <-deadline.C:
			t.Errorf("server %s ignored SIGTERM for %v; killing it", p.id, procStopTimeout)
			p.cmd.Process.Signal(os.Kill)
			<-p.exited
		}
	}
}

// printLogs prints the tail of every server's log.
func (pc *procCluster) printLogs() {
	t := pc.t
	for _, id := range pc.ids() {
		path := filepath.Join(pc.logDir, id+".log")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Logf("--- %s: no log (%v)", id, err)
			continue
		}
		t.Logf("--- %s: last %d lines of %s ---\n%s", id, procLogTailLines, path, logTail(string(data), procLogTailLines))
	}
}

// clientConfig is the configuration of the admin client of the cluster.
func (pc *procCluster) clientConfig() client.Config {
	pc.t.Helper()
	tlsCfg, err := pc.cfg.ClientTLS()
	if err != nil {
		pc.t.Fatal(err)
	}
	return client.Config{ClusterID: pc.cfg.ClusterID, Ordering: pc.cfg.OrderingAddrs(), TLS: tlsCfg, Insecure: tlsCfg == nil}
}

// dialOption is the admin client's transport credentials, for calling a
// server's services directly.
func (pc *procCluster) dialOption() grpc.DialOption {
	tlsCfg, err := pc.cfg.ClientTLS()
	if err != nil {
		pc.t.Fatal(err)
	}
	if tlsCfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))
}

// dial connects a client, retrying until an ordering replica answers.
func (pc *procCluster) dial(ctx context.Context) *client.Client {
	t := pc.t
	t.Helper()
	var cl *client.Client
	var last error
	ok := eventually(t, procReadyTimeout, func() bool {
		dctx, cancel := context.WithTimeout(ctx, procStatusTimeout)
		defer cancel()
		cl, last = client.Dial(dctx, pc.clientConfig())
		return last == nil
	})
	if !ok {
		t.Fatalf("dial the cluster: %v", last)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// waitStatus polls Status until cond returns "" and returns that status;
// cond returns why the cluster is not there yet.
func waitStatus(t *testing.T, ctx context.Context, cl *client.Client, timeout time.Duration, what string, cond func(*pb.StatusResponse) string) *pb.StatusResponse {
	t.Helper()
	var st *pb.StatusResponse
	why := "no status yet"
	ok := eventually(t, timeout, func() bool {
		sctx, cancel := context.WithTimeout(ctx, procStatusTimeout)
		defer cancel()
		s, err := cl.Status(sctx)
		if err != nil {
			why = fmt.Sprintf("status: %v", err)
			return false
		}
		st = s
		why = cond(s)
		return why == ""
	})
	if !ok {
		t.Fatalf("%s: not reached within %v: %s\nlast status: %v", what, timeout, why, st)
	}
	return st
}

func liveShard(st *pb.StatusResponse, group string) *pb.ShardInfo {
	for _, sh := range st.Shards {
		if sh.Group == group && sh.State == pb.ShardState_SHARD_LIVE {
			return sh
		}
	}
	return nil
}

func shardByID(st *pb.StatusResponse, id uint32) *pb.ShardInfo {
	for _, sh := range st.Shards {
		if sh.Id == id {
			return sh
		}
	}
	return nil
}

// clusterReady says why st is not a cluster with a leader and a live shard
// in each of groups, or "".
func clusterReady(st *pb.StatusResponse, groups ...string) string {
	if st.LeaderId == "" {
		return "no ordering leader"
	}
	for _, g := range groups {
		if liveShard(st, g) == nil {
			return fmt.Sprintf("no live shard of group %q", g)
		}
	}
	return ""
}

func TestProcessFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes; skipped under -short")
	}
	ld := startProcLoad(t)
	pc, admin, h, clk := ld.pc, ld.admin, ld.h, ld.clk
	ctx := t.Context()

	// Phase 2: kill -9 the ordering leader and one group's primary.
	st := waitStatus(t, ctx, admin, procStatusTimeout*2, "status before the faults", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})
	leader := st.LeaderId
	victimShard := liveShard(st, []string{"a", "b"}[ld.seed%2])
	if len(victimShard.Replicas) == 0 {
		t.Fatalf("live shard %d lists no replicas: %v", victimShard.Id, victimShard)
	}
	primary := victimShard.Replicas[0].Id
	ackedBefore, _ := h.counts()
	t.Logf("at %v (%d acked): kill -9 ordering leader %s and %s, primary of shard %d (group %s)",
		clk.now().Round(time.Millisecond), ackedBefore, leader, primary, victimShard.Id, victimShard.Group)
	pc.kill9(leader)
	pc.kill9(primary)
	pc.checkAlive()

	// Appends go on: once the failure timeout passes, the shard of the dead
	// primary fails over to its backup, keeping its id, and the appends in
	// flight to the dead primary go to the new one.
	waitAcks(t, h, clk, procPhaseAcksMin, "while "+leader+" and "+primary+" are down")
	failedOver := func(st *pb.StatusResponse) string {
		if st.LeaderId == "" {
			return "no ordering leader"
		}
		sh := shardByID(st, victimShard.Id)
		if sh == nil || sh.State != pb.ShardState_SHARD_LIVE || sh.Epoch <= victimShard.Epoch || len(sh.Replicas) == 0 || sh.Replicas[0].Id == primary {
			return fmt.Sprintf("shard %d is %v, want live at a newer epoch than %d without %s", victimShard.Id, sh, victimShard.Epoch, primary)
		}
		if live := liveShard(st, victimShard.Group); live == nil || live.Id != victimShard.Id {
			return fmt.Sprintf("group %s's live shard is %v, want %d", victimShard.Group, live, victimShard.Id)
		}
		return ""
	}
	waitStatus(t, ctx, admin, procPhaseTimeout, "shard of the killed primary failed over", failedOver)

	// Phase 3: restart both on their old data; the shard keeps its id and
	// its new primary, and the group forms no other shard.
	ackedDown, _ := h.counts()
	t.Logf("at %v (%d acked): restart %s and %s", clk.now().Round(time.Millisecond), ackedDown, leader, primary)
	pc.start(leader)
	pc.start(primary)
	waitAcks(t, h, clk, procPhaseAcksMin, "after the restarts")
	waitStatus(t, ctx, admin, procPhaseTimeout, "cluster after the restarts", failedOver)
	ld.finish()
}

// procLoad is a cluster of processes under paced appends, reads and two
// subscribers (and, in speculative mode, two applications that roll back
// on fail_spec), its history recorded.
type procLoad struct {
	t      *testing.T
	start  time.Time
	pc     *procCluster
	admin  *client.Client
	h      *history
	clk    clock
	subs   []*collector
	apps   []*rollbackApp
	seed   uint64
	wg     *sync.WaitGroup
	stop   chan struct{}
	giveUp context.CancelFunc
}

// startProcLoad starts a cluster of 7 processes and the load, and waits
// for the first phase's acknowledgements.
func startProcLoad(t *testing.T) *procLoad {
	return startLoad(t, newProcCluster(t, augurBinary(t), time.Millisecond, ""))
}

// setFailureTimeout rewrites the cluster file with another failure
// timeout, before its servers start.
func (pc *procCluster) setFailureTimeout(d time.Duration) {
	pc.cfg.FailureTimeout = config.Duration(d)
	if err := pc.cfg.Save(pc.cfgPath); err != nil {
		pc.t.Fatal(err)
	}
}

// dense says the cluster's order has no no-ops (speculative order has).
func (pc *procCluster) dense() bool { return pc.cfg.Mode != config.ModeSpec }

// startLoad starts the servers of pc and the load, and waits for the
// first phase's acknowledgements.
func startLoad(t *testing.T, pc *procCluster) *procLoad {
	testStart := time.Now()
	ctx := t.Context()
	pc.startAll()

	admin := pc.dial(ctx)
	st := waitStatus(t, ctx, admin, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		if why := clusterReady(st, procGroups...); why != "" {
			return why
		}
		live := 0
		for _, sh := range st.Shards {
			if sh.State == pb.ShardState_SHARD_LIVE {
				live++
			}
		}
		if live != len(procGroups) {
			return fmt.Sprintf("%d live shards, want %d", live, len(procGroups))
		}
		return ""
	})
	pc.checkAlive()
	t.Logf("cluster ready after %v: leader %s, shards %v", time.Since(testStart).Round(time.Millisecond), st.LeaderId, st.Shards)

	ld := &procLoad{t: t, start: testStart, pc: pc, admin: admin, h: &history{}, clk: newClock(), wg: &sync.WaitGroup{}, stop: make(chan struct{})}
	ld.subs = []*collector{
		collect(ctx, "s1", subscribe(t, ctx, pc.dial(ctx))),
		collect(ctx, "s2", subscribe(t, ctx, pc.dial(ctx))),
	}
	if !pc.dense() {
		for _, name := range []string{"app1", "app2"} {
			sub, err := pc.dial(ctx).SubscribeSpec(ctx, 0, client.Filter{}, false)
			if err != nil {
				t.Fatalf("speculative subscription: %v", err)
			}
			t.Cleanup(sub.Close)
			ld.apps = append(ld.apps, runRollbackApp(ctx, name, sub))
		}
	}
	// opCtx bounds the appends and reads; it ends early only when the test
	// gives up waiting for them.
	opCtx, giveUp := context.WithCancel(ctx)
	t.Cleanup(giveUp)
	ld.giveUp = giveUp
	for i := range procAppenders {
		cl := pc.dial(ctx)
		ld.wg.Go(func() { appendPaced(opCtx, ld.stop, cl, ld.h, ld.clk, i, procAppendPace) })
	}
	ld.seed = testSeed(t)
	readCl := pc.dial(ctx)
	ld.wg.Go(func() { readPaced(opCtx, ld.stop, readCl, ld.h, ld.clk, procAppenders, ld.seed, pc.dense()) })

	// Phase 1: healthy.
	waitAcks(t, ld.h, ld.clk, procPhaseAcksMin, "before the faults")
	return ld
}

// finish stops the load and checks the history: every append returned,
// acknowledged positions are dense (in a mode without no-ops), the
// subscribers read every acknowledged append once at its position, the
// speculative applications end with their order, and the history is
// linearizable.
func (ld *procLoad) finish() {
	t, pc, admin, h, clk := ld.t, ld.pc, ld.admin, ld.h, ld.clk
	ctx := t.Context()
	pc.checkAlive()
	close(ld.stop)
	drainAppends(t, h, ld.wg, ld.giveUp, procDrainTimeout)
	appends, reads := h.snapshot()
	acked, _ := h.counts()
	t.Logf("at %v: %d appends (%d acked, per shard %v), %d reads", clk.now().Round(time.Millisecond), len(appends), acked, h.ackedByShard(), len(reads))
	checkAppendsReturned(t, appends)
	if acked == 0 {
		t.Fatal("no append was acknowledged")
	}

	// Every acknowledged position is ordered, so the subscribers reach it.
	dense := pc.dense()
	n := int(h.tail())
	if dense {
		if n != acked {
			t.Errorf("%d appends acknowledged but the largest acknowledged position is %d: positions are not dense or are shared", acked, n-1)
		}
		waitCollectors(t, procCatchUpTimeout, n, ld.subs...)
		if st, err := admin.Status(ctx); err != nil {
			t.Errorf("final status: %v", err)
		} else if st.Tail != uint64(n) {
			t.Errorf("the log holds %d records but %d appends were acknowledged", st.Tail, n)
		}
	} else {
		waitCollectorsAt(t, procCatchUpTimeout, uint64(n-1), ld.subs...)
	}
	var logs []check.Log
	for _, s := range ld.subs {
		logs = append(logs, checkLog(t, s.name, s.entries(), appends, dense))
	}
	failOn(t, check.Order(checkAppends(appends), logs...))
	failOn(t, check.RealTime(checkAppends(appends)))
	failOn(t, check.Returned(nil, checkReadOps(reads)))
	failOn(t, check.Reads(checkReadOps(reads), logs[0]))
	checkLinearizable(t, appends, reads, dense)
	for _, a := range ld.apps {
		a.agrees(t, ld.subs[0].entries(), uint64(n-1))
	}
	pc.checkAlive()
	t.Logf("done in %v", time.Since(ld.start).Round(time.Millisecond))
}

func subscribe(t *testing.T, ctx context.Context, cl *client.Client) *client.Subscription {
	t.Helper()
	sub, err := cl.Subscribe(ctx, 0, client.Filter{})
	if err != nil {
		t.Fatalf("subscribe from 0: %v", err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// waitAcks waits until at least n more appends are acknowledged and
// procPhaseMin has passed.
func waitAcks(t *testing.T, h *history, clk clock, n int, phase string) {
	t.Helper()
	waitAcksFor(t, h, clk, n, procPhaseMin, phase)
}

// waitAcksFor waits until at least n more appends are acknowledged and
// least has passed.
func waitAcksFor(t *testing.T, h *history, clk clock, n int, least time.Duration, phase string) {
	t.Helper()
	from, _ := h.counts()
	start := clk.now()
	ok := eventually(t, procPhaseTimeout, func() bool {
		acked, _ := h.counts()
		return acked-from >= n && clk.now()-start >= least
	})
	if !ok {
		acked, pending := h.counts()
		t.Fatalf("appends stalled %s: %d acknowledged in %v (want %d), %d in flight", phase, acked-from, procPhaseTimeout, n, pending)
	}
}

// appendPaced appends "w<worker>-<n>" every pace until stop is closed,
// recording each append.
func appendPaced(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int, pace time.Duration) {
	appendEvery(ctx, stop, h, clk, worker, pace, cl.Append)
}

// appendEvery appends "w<worker>-<n>", keyed "w<worker>", with appendFn
// every pace until stop is closed, recording each append.
func appendEvery(ctx context.Context, stop <-chan struct{}, h *history, clk clock, worker int, pace time.Duration,
	appendFn func(context.Context, client.Record) (client.Ack, error)) {
	tick := time.NewTicker(pace)
	defer tick.Stop()
	key := fmt.Sprintf("w%d", worker)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		payload := fmt.Sprintf("w%d-%d", worker, n)
		h.begin()
		call := clk.now()
		ack, err := appendFn(ctx, client.Record{Key: key, Payload: []byte(payload)})
		h.addAppend(appendOp{worker: worker, payload: payload, call: call, ret: clk.now(), ack: ack, err: err})
	}
}

// readPaced reads a random ordered position every procReadPace until stop
// is closed, recording each read; in a mode with no-ops (not dense), the
// position of a random acknowledged append.
func readPaced(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int, seed uint64, dense bool) {
	readPacedFrom(ctx, stop, cl, h, clk, worker, seed, dense, 0)
}

// readPacedFrom is readPaced reading only positions at or above floor (a
// trim point) in a mode without no-ops.
func readPacedFrom(ctx context.Context, stop <-chan struct{}, cl *client.Client, h *history, clk clock, worker int, seed uint64, dense bool, floor uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	tick := time.NewTicker(procReadPace)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tail := h.tail()
		if tail <= floor {
			continue
		}
		pos := floor + rng.Uint64N(tail-floor)
		if !dense {
			pos = h.ackedPosition(rng)
		}
		call := clk.now()
		rctx, cancel := context.WithTimeout(ctx, procReadTimeout)
		e, err := cl.Read(rctx, pos)
		cancel()
		ret := clk.now()
		if err == nil && e.Position != pos {
			err = fmt.Errorf("read of position %d returned the entry at position %d", pos, e.Position)
		}
		h.addRead(readOp{worker: worker, pos: pos, call: call, ret: ret, payload: string(e.Record.Payload), err: err})
	}
}
