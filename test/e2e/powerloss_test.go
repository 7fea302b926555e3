package e2e

// TestPowerLoss cuts the power of the whole 7-process cluster under load:
// every server runs with the synctrace hook (AUGUR_SYNC_TRACE), which
// records per file the length each fsync covered; the test kill -9s every
// process at once, cuts every file in the data directories back to what
// its last fsync covered (what a power cut of the one host leaves), and
// restarts them all. With the defaults (fsync group, raft_fsync true) every
// acknowledged append must come back at its position and no position may
// be given out twice. With the opt-outs (fsync interval, raft_fsync false)
// the README promises only that kill -9 loses nothing; the test reports
// what the power cut lost:
//
//	go test ./test/e2e/ -run PowerLoss -v

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
	"github.com/augur-log/augur/internal/synctrace"
)

// Workload and time bounds of TestPowerLoss.
const (
	powerAppenders = 8
	// powerLoad is how long the appenders run before the power cut; they
	// run right up to it, so the cut finds writes in flight.
	powerLoad         = 2 * time.Second
	powerAppendsMin   = 200
	powerPayloadBytes = 512
	// powerAfterAppends is how many appends the restarted cluster takes
	// before the read-back: a position the cut lost would be given to one.
	powerAfterAppends = 100
	powerAppendWait   = 5 * time.Second
	// powerReadWait bounds the read-back; after a lossy cut it waits this
	// long at the first lost position.
	powerReadWait = 5 * time.Second
)

func TestPowerLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 7 server processes twice; skipped under -short")
	}
	bin := augurBinary(t)
	t.Run("defaults", func(t *testing.T) {
		o := powerLoss(t, bin, "")
		t.Logf("defaults: %v", o)
		if !o.recovered {
			t.Fatalf("the cluster did not recover from the power cut: %s", o.why)
		}
		if o.lost > 0 || o.reused > 0 || o.wrong > 0 {
			t.Errorf("a power cut lost %d of %d acknowledged appends (%d read back with another record, %d positions given out again)",
				o.lost, o.acked, o.wrong, o.reused)
		}
	})
	t.Run("optouts", func(t *testing.T) {
		o := powerLoss(t, bin, "fsync: interval\nraft_fsync: false\n")
		// The README's risk of the opt-outs: a power cut may lose
		// acknowledged appends and give their positions out again. Whether
		// it does in one run depends on the kernel's writeback, so this
		// only reports it.
		t.Logf("opt-outs: %v", o)
	})
}

// powerOutcome is what one power cut did.
type powerOutcome struct {
	acked     int // appends acknowledged before the cut
	recovered bool
	why       string // why the cluster did not recover
	// lost counts acknowledged appends not read back at their position:
	// wrong of them read back with another record there, and reused counts
	// appends after the restart given an acknowledged one's position.
	lost, wrong, reused int
	truncated           int64 // bytes the cut dropped
}

func (o powerOutcome) String() string {
	s := fmt.Sprintf("%d acknowledged, cut dropped %d unsynced bytes", o.acked, o.truncated)
	if !o.recovered {
		return s + ", no recovery: " + o.why
	}
	return s + fmt.Sprintf(", %d lost (%d read back as another record), %d positions given out again", o.lost, o.wrong, o.reused)
}

// powerLoss runs the cluster with settings (YAML lines), cuts its power
// under load and restarts it.
func powerLoss(t *testing.T, bin, settings string) powerOutcome {
	pc := newProcClusterSettings(t, bin, time.Millisecond, settings)
	// After a lossy cut (the opt-outs) a server was seen to hang on
	// SIGTERM for over procStopTimeout; that is not what this test is
	// about, so it ends the servers with SIGKILL.
	defer pc.killAll()
	traceDir := t.TempDir()
	pc.env = func(id string) []string {
		return []string{synctrace.EnvVar + "=" + filepath.Join(traceDir, id+".trace")}
	}
	pc.startAll()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := pc.dial(ctx)
	waitStatus(t, ctx, cl, procReadyTimeout, "cluster ready", func(st *pb.StatusResponse) string {
		return clusterReady(st, "a", "b")
	})

	// Load, right up to the power cut.
	var mu sync.Mutex
	acked := map[uint64]string{} // position → payload
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range powerAppenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; loadCtx.Err() == nil; seq++ {
				payload := powerPayload(fmt.Sprintf("before w%d s%d", w, seq))
				actx, cancel := context.WithTimeout(loadCtx, powerAppendWait)
				a, err := cl.Append(actx, client.Record{Payload: []byte(payload)})
				cancel()
				if err != nil {
					continue
				}
				mu.Lock()
				if prev, dup := acked[a.Position]; dup {
					t.Errorf("position %d acknowledged twice: %.20q and %.20q", a.Position, prev, payload)
				}
				acked[a.Position] = payload
				mu.Unlock()
			}
		}()
	}
	time.Sleep(powerLoad) // the load's length, not a synchronisation
	pc.killAll()
	stopLoad()
	wg.Wait()
	mu.Lock()
	o := powerOutcome{acked: len(acked)}
	mu.Unlock()
	if o.acked < powerAppendsMin {
		t.Fatalf("only %d appends acknowledged under load, want at least %d", o.acked, powerAppendsMin)
	}

	o.truncated = cutToSynced(t, pc.cfg.DataDir, traceDir)
	for _, id := range pc.ids() {
		pc.start(id)
	}

	// The restarted cluster: ready, then a few appends, then the read-back.
	cl2, err := dialWithin(ctx, pc, procReadyTimeout)
	if err != nil {
		o.why = err.Error()
		return o
	}
	defer cl2.Close()
	if why := awaitReady(ctx, cl2, procReadyTimeout); why != "" {
		o.why = why
		return o
	}
	after := map[uint64]bool{}
	for i := range powerAfterAppends {
		actx, cancel := context.WithTimeout(ctx, powerAppendWait)
		a, err := cl2.Append(actx, client.Record{Payload: []byte(powerPayload(fmt.Sprintf("after %d", i)))})
		cancel()
		if err != nil {
			o.why = fmt.Sprintf("append after the restart: %v", err)
			return o
		}
		after[a.Position] = true
	}
	o.recovered = true
	for pos := range after {
		if _, ok := acked[pos]; ok {
			o.reused++
		}
	}
	got, readErr := readAll(ctx, cl2, acked)
	for pos, want := range acked {
		switch have, ok := got[pos]; {
		case !ok:
			o.lost++
		case have != want:
			o.lost++
			o.wrong++
		}
	}
	if o.lost > 0 && readErr != nil {
		t.Logf("read-back ended with %v", readErr)
	}
	return o
}

// powerPayload is a record of powerPayloadBytes that starts with tag.
func powerPayload(tag string) string {
	return tag + " " + strings.Repeat(".", max(powerPayloadBytes-len(tag)-1, 0))
}

// killAll sends SIGKILL to every server at once, then waits for them all:
// a power cut stops every process at the same moment.
func (pc *procCluster) killAll() {
	t := pc.t
	t.Helper()
	pc.mu.Lock()
	var ps []*proc
	for _, p := range pc.procs {
		p.expected = true
		ps = append(ps, p)
	}
	pc.mu.Unlock()
	for _, p := range ps {
		if err := p.cmd.Process.Signal(os.Kill); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("kill -9 %s: %v", p.id, err)
		}
	}
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-time.After(procStopTimeout):
			t.Fatalf("%s did not die within %v of SIGKILL", p.id, procStopTimeout)
		}
	}
}

// cutToSynced cuts every file under dataDir back to the length the last
// fsync of it covered, per the synctrace files in traceDir; a file never
// fsynced loses all its bytes. It returns how many bytes it dropped.
func cutToSynced(t *testing.T, dataDir, traceDir string) int64 {
	t.Helper()
	type inode struct{ dev, ino uint64 }
	synced := map[inode]int64{}
	traces, err := filepath.Glob(filepath.Join(traceDir, "*.trace"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range traces {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 3 {
				continue // a line cut short by the kill covers nothing
			}
			dev, err1 := strconv.ParseUint(fields[0], 10, 64)
			ino, err2 := strconv.ParseUint(fields[1], 10, 64)
			size, err3 := strconv.ParseInt(fields[2], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			// A file only grows between fsyncs of it, except when it is
			// rewritten, and the last record is the newest.
			synced[inode{dev, ino}] = size
		}
		f.Close()
	}
	var dropped int64
	err = filepath.WalkDir(dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("no inode for %s", path)
		}
		keep := synced[inode{uint64(st.Dev), uint64(st.Ino)}]
		if fi.Size() <= keep {
			return nil
		}
		dropped += fi.Size() - keep
		return os.Truncate(path, keep)
	})
	if err != nil {
		t.Fatalf("cut the data files back to what was synced: %v", err)
	}
	return dropped
}

// dialWithin dials the cluster, retrying for up to timeout.
func dialWithin(ctx context.Context, pc *procCluster, timeout time.Duration) (*client.Client, error) {
	deadline := time.Now().Add(timeout)
	for {
		dctx, cancel := context.WithTimeout(ctx, procStatusTimeout)
		cl, err := client.Dial(dctx, pc.clientConfig())
		cancel()
		if err == nil {
			return cl, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("dial after the restart: %w", err)
		}
		select {
		case <-time.After(pollInterval):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// awaitReady waits for a leader and a live shard in groups a and b and
// says why not, if they did not come within timeout.
func awaitReady(ctx context.Context, cl *client.Client, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	why := "no status yet"
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(ctx, procStatusTimeout)
		st, err := cl.Status(sctx)
		cancel()
		if err != nil {
			why = fmt.Sprintf("status: %v", err)
		} else if why = clusterReady(st, "a", "b"); why == "" {
			return ""
		}
		select {
		case <-time.After(pollInterval):
		case <-ctx.Done():
			return ctx.Err().Error()
		}
	}
	return fmt.Sprintf("not ready within %v after the restart: %s", timeout, why)
}

// readAll reads the log from position 0 through the last acknowledged
// position and returns each record's payload by position; it stops at
// the first error, which it returns.
func readAll(ctx context.Context, cl *client.Client, acked map[uint64]string) (map[uint64]string, error) {
	var last uint64
	for pos := range acked {
		last = max(last, pos)
	}
	rctx, cancel := context.WithTimeout(ctx, powerReadWait)
	defer cancel()
	sub, err := cl.Subscribe(rctx, 0, client.Filter{})
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	got := map[uint64]string{}
	for {
		e, err := sub.Next(rctx)
		if err != nil {
			return got, err
		}
		got[e.Position] = string(e.Record.Payload)
		if e.Position >= last {
			return got, nil
		}
	}
}
