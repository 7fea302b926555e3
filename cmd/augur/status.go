package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/augur-log/augur/client"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/augur-log/augur/api/augurpb"
)

func newStatusCmd() *cobra.Command {
	var (
		cf     connFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the ordering replicas and leader, the shards, the last cut, tail and trim point",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := cf.resolve()
			if err != nil {
				return err
			}
			plaintext := t.cfg.Insecure
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Status(ctx)
				if err != nil {
					return fmt.Errorf("status: %w", err)
				}
				if asJSON {
					data, err := statusJSON(st, askHealth(ctx, cl, st))
					if err != nil {
						return fmt.Errorf("encode status: %w", err)
					}
					_, err = fmt.Fprintln(cmd.OutOrStdout(), string(data))
					return err
				}
				if plaintext {
					fmt.Fprintf(cmd.OutOrStdout(), "WARNING: %s\n\n", insecureWarning)
				}
				if err := printStatus(cmd.OutOrStdout(), st); err != nil {
					return err
				}
				if st.GetLazy() != nil {
					reps, errs := cl.SequencingStatus(ctx)
					if err := printSequencing(cmd.OutOrStdout(), st.GetLazy(), reps, errs); err != nil {
						return err
					}
				}
				return printHealth(cmd.OutOrStdout(), st, askHealth(ctx, cl, st))
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// printStatus writes st as readable tables.
func printStatus(w io.Writer, st *pb.StatusResponse) error {
	leader := st.LeaderId
	if leader == "" {
		leader = "(none: no quorum or an election is under way)"
	}
	fmt.Fprintf(w, "cluster %s   leader %s   membership v%d\n\n", st.ClusterId, leader, st.MembershipVersion)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDERING\tADDR\tROLE")
	for _, m := range st.Members {
		role := "follower"
		switch {
		case m.Leader:
			role = "leader"
		case m.Unreachable:
			role = "unreachable (the leader has not heard from it for an election timeout)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Id, m.Addr, role)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tGROUP\tSTATE\tLENGTH\tADDED AT CUT\tEPOCH\tREPLICAS (primary first)\tOUT")
	for _, sh := range st.Shards {
		state := shardState(sh.State)
		switch {
		case sh.State == pb.ShardState_SHARD_FINALIZING:
			state += fmt.Sprintf(" (until cut %d)", sh.FinalCut)
		case sh.State == pb.ShardState_SHARD_FINALIZED && sh.Failed:
			state += " (replica failed)"
		}
		var reps, out []string
		for _, r := range sh.Replicas {
			reps = append(reps, r.Id+"@"+r.Addr)
		}
		for _, r := range sh.Out {
			out = append(out, r.Id)
		}
		if len(out) == 0 {
			out = []string{"-"}
		}
		length := "-"
		for _, l := range st.LastCut.GetLengths() {
			if l.Shard == sh.Id {
				length = strconv.FormatUint(l.Length, 10)
			}
		}
		if sh.State == pb.ShardState_SHARD_FINALIZED {
			length = strconv.FormatUint(sh.FinalLength, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", sh.Id, sh.Group, state, length, sh.AddedCut, sh.Epoch, strings.Join(reps, " "), strings.Join(out, " "))
	}
	if len(st.Shards) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t\t\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)

	c := st.LastCut
	if c.GetIndex() == 0 {
		fmt.Fprintln(w, "last cut   none yet")
	} else {
		fmt.Fprintf(w, "last cut   #%d: positions [%d, %d)\n", c.Index, c.Start, c.End)
	}
	fmt.Fprintf(w, "tail       %d\n", st.Tail)
	fmt.Fprintf(w, "trim       %d\n", st.Trim)
	if sp := st.Spec; sp != nil {
		fmt.Fprintf(w, "speculation %s\n", speculation(sp))
	}
	return nil
}

// speculation says what a speculative cluster's leader does: announce
// lease windows, whose cuts are predetermined, or cut eagerly because
// fills would cost more than speculation saves.
func speculation(sp *pb.SpecState) string {
	ws := sp.Windows
	if len(ws) == 0 {
		if sp.Fallback {
			return "off for now: eager cuts, as in eager order (at the shards' current rates, filling their empty slots with no-ops would cost more than speculation saves; the leader tries windows again as the rates change)"
		}
		return "not started: no lease window announced yet"
	}
	last := ws[len(ws)-1]
	through := last.FirstCut + last.Cuts - 1
	if sp.Fallback {
		return fmt.Sprintf("ending: lease windows through cut %d, then eager cuts (filling the shards' empty slots would cost more than speculation saves at their current rates)", through)
	}
	line := fmt.Sprintf("on: lease windows of %d cuts announced through cut %d; entries per cut: %s", sp.WindowCuts, through, quotaList(last.Quotas))
	if last.Groups > 1 {
		line += fmt.Sprintf("; %d staggered groups, each shard in every %s cut", last.Groups, ordinal(last.Groups))
	}
	if sp.View == 1 {
		line += "; view 1 (a whole shard failed once)"
	} else if sp.View > 1 {
		line += fmt.Sprintf("; view %d (whole shards failed %d times)", sp.View, sp.View)
	}
	return line
}

// quotaListMax is how many shards' quotas the speculation line lists one
// by one; more are summed up.
const quotaListMax = 8

// quotaList says how many entries each shard adds to its cuts.
func quotaList(qs []*pb.Quota) string {
	if len(qs) > quotaListMax {
		lo, hi := qs[0].PerCut, qs[0].PerCut
		for _, q := range qs {
			lo, hi = min(lo, q.PerCut), max(hi, q.PerCut)
		}
		if lo == hi {
			return fmt.Sprintf("%d for each of %d shards", lo, len(qs))
		}
		return fmt.Sprintf("%d to %d for each of %d shards", lo, hi, len(qs))
	}
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		out = append(out, fmt.Sprintf("shard %d: %d", q.Shard, q.PerCut))
	}
	return strings.Join(out, ", ")
}

// ordinal is n as in "every n-th".
func ordinal(n uint32) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return fmt.Sprintf("%dth", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	}
	return fmt.Sprintf("%dth", n)
}

func shardState(s pb.ShardState) string {
	switch s {
	case pb.ShardState_SHARD_LIVE:
		return "live"
	case pb.ShardState_SHARD_FINALIZING:
		return "finalizing"
	case pb.ShardState_SHARD_FINALIZED:
		return "finalized"
	}
	return s.String()
}

// askHealth pings every storage server the shard table names, once each,
// for the state of its copies; a server that does not answer maps to its
// error.
func askHealth(ctx context.Context, cl *client.Client, st *pb.StatusResponse) map[string]healthAnswer {
	out := map[string]healthAnswer{}
	for _, sh := range st.Shards {
		for _, r := range append(slices.Clone(sh.Replicas), sh.Out...) {
			if _, ok := out[r.Addr]; ok {
				continue
			}
			resp, err := cl.Ping(ctx, r.Addr)
			out[r.Addr] = healthAnswer{resp: resp, err: err}
		}
	}
	return out
}

// healthAnswer is one storage server's answer to Ping, or why it gave none.
type healthAnswer struct {
	resp *pb.PingResponse
	err  error
}

// printHealth writes, for every replica of every shard not finalized
// long ago, whether its copy can be served: the storage servers, not the
// ordering layer, know that, so each was asked directly (askHealth).
func printHealth(w io.Writer, st *pb.StatusResponse, answers map[string]healthAnswer) error {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tREPLICA\tSTATE\tCOPY")
	for _, sh := range st.Shards {
		for i, r := range sh.Replicas {
			a := answers[r.Addr]
			state := replicaState(sh, true, i == 0, a)
			if r.Pending {
				// Speculative and lazy order: no survivor of its
				// primary yet.
				state += ", pending its primary's word"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", sh.Id, r.Id, state, copyState(sh.Id, a))
		}
		for _, r := range sh.Out {
			a := answers[r.Addr]
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", sh.Id, r.Id, replicaState(sh, false, false, a), copyState(sh.Id, a))
		}
	}
	if len(st.Shards) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t")
	}
	return tw.Flush()
}

// replicaState says in words what a replica of shard sh does: one of its
// configuration (member; primary says which) serves, one out of it was
// fenced or restarted and waits to rejoin, and one that does not answer
// is down.
func replicaState(sh *pb.ShardInfo, member, primary bool, a healthAnswer) string {
	if a.err != nil {
		return "down"
	}
	role := ""
	if a.resp != nil {
		for _, h := range a.resp.Health {
			if h.Shard == sh.Id {
				role = h.Role
			}
		}
	}
	switch {
	case sh.State == pb.ShardState_SHARD_FINALIZED && role != "":
		return "final"
	case member && (role == "primary" && primary || role == "backup" && !primary):
		return "serving (" + role + ")"
	case member && role == "":
		return "joining (holds no copy yet)"
	case member:
		return "behind (still " + role + ")"
	case role == "fenced":
		return "fenced"
	case role == "catching-up":
		return "catching up"
	case role == "":
		return "out (holds no copy)"
	}
	return "out (" + role + "; rejoins once caught up)"
}

// copyState says in words what a storage server's answer says of its copy
// of shard id.
func copyState(id uint32, a healthAnswer) string {
	if a.err != nil {
		return "unreachable: " + a.err.Error()
	}
	if a.resp == nil {
		return "not asked"
	}
	for _, h := range a.resp.Health {
		if h.Shard != id {
			continue
		}
		var parts []string
		if h.Lost {
			parts = append(parts, "lost: missed records the shard ordered; none of it is served")
		}
		if len(h.Damaged) > 0 {
			var n uint64
			var rs []string
			for _, d := range h.Damaged {
				n += d.End - d.First
				rs = append(rs, fmt.Sprintf("[%d, %d)", d.First, d.End))
			}
			parts = append(parts, fmt.Sprintf("damaged: %d records at local %s refused until repaired", n, strings.Join(rs, " ")))
		}
		if cu := h.CatchUp; cu != nil {
			parts = append(parts, catchUpState(cu))
		}
		if len(parts) == 0 {
			return "ok"
		}
		return strings.Join(parts, "; ")
	}
	return "not held"
}

// catchUpState says in words how far a copy's catch-up (repair) is.
func catchUpState(cu *pb.CatchUpProgress) string {
	var b strings.Builder
	switch {
	case cu.Rejoin && cu.Asked:
		fmt.Fprintf(&b, "caught up (%d copied); asked to rejoin the configuration", cu.Fetched)
	case cu.Rejoin && cu.Stalled:
		fmt.Fprintf(&b, "catching up to rejoin: %d copied, waiting for a replica of the configuration", cu.Fetched)
	case cu.Rejoin && cu.Source != "":
		fmt.Fprintf(&b, "catching up to rejoin: %d copied from %s", cu.Fetched, cu.Source)
	case cu.Rejoin:
		fmt.Fprintf(&b, "catching up to rejoin: %d copied", cu.Fetched)
	case cu.Done:
		fmt.Fprintf(&b, "repair done: %d of %d copied", cu.Fetched, cu.Total)
	case cu.Stalled:
		fmt.Fprintf(&b, "repairing: %d of %d copied, waiting for a live replica", cu.Fetched, cu.Total)
	case cu.Source != "":
		fmt.Fprintf(&b, "repairing: %d of %d copied from %s", cu.Fetched, cu.Total, cu.Source)
	default:
		fmt.Fprintf(&b, "repairing: %d of %d copied", cu.Fetched, cu.Total)
	}
	for _, l := range cu.Lost {
		where := ""
		if l.HasGlobal {
			where = fmt.Sprintf(" (positions [%d, %d))", l.GlobalFirst, l.GlobalFirst+l.End-l.First)
		}
		fmt.Fprintf(&b, "; lost: local [%d, %d)%s held by no live replica", l.First, l.End, where)
	}
	return b.String()
}

// statusJSON is st as JSON, with one more field, "replica_health": what
// each storage server the shard table names said of its copies (Ping's
// health), or why it did not answer.
func statusJSON(st *pb.StatusResponse, answers map[string]healthAnswer) ([]byte, error) {
	opts := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	raw, err := opts.Marshal(st)
	if err != nil {
		return nil, err
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	type serverHealth struct {
		Addr   string            `json:"addr"`
		Server string            `json:"server_id,omitempty"`
		Error  string            `json:"error,omitempty"`
		Health []json.RawMessage `json:"health"`
	}
	addrs := make([]string, 0, len(answers))
	for a := range answers {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	healths := []serverHealth{}
	for _, a := range addrs {
		ans := answers[a]
		sh := serverHealth{Addr: a, Health: []json.RawMessage{}}
		if ans.err != nil {
			sh.Error = ans.err.Error()
		}
		if ans.resp != nil {
			sh.Server = ans.resp.ServerId
			for _, h := range ans.resp.Health {
				b, err := opts.Marshal(h)
				if err != nil {
					return nil, err
				}
				sh.Health = append(sh.Health, b)
			}
		}
		healths = append(healths, sh)
	}
	if out["replica_health"], err = json.Marshal(healths); err != nil {
		return nil, err
	}
	return json.MarshalIndent(out, "", "  ")
}

// printSequencing writes the sequencing layer of a lazy cluster: the view
// the control plane records and what each replica says of itself.
func printSequencing(w io.Writer, lz *pb.LazyState, reps []*pb.SequencingStatusResponse, errs []error) error {
	fmt.Fprintln(w)
	sealed := ""
	if lz.GetSealed() {
		sealed = " (sealed)"
	}
	fmt.Fprintf(w, "sequencing view %d%s\n", lz.GetView(), sealed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQUENCING\tADDR\tROLE\tVIEW\tLAST-ORDERED\tSTABLE-GP\tUNORDERED")
	var stable uint64
	for i, r := range lz.GetReplicas() {
		role := "follower"
		if i == 0 {
			role = "leader"
		}
		if i >= len(reps) || reps[i] == nil {
			msg := "no answer"
			if i < len(errs) && errs[i] != nil {
				msg = errs[i].Error()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t(%s)\n", r.GetId(), r.GetAddr(), role, msg)
			continue
		}
		q := reps[i]
		if q.GetSealed() {
			role += ", sealed"
		}
		stable = max(stable, q.GetStableGp())
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.GetId(), r.GetAddr(), role, q.GetView(), q.GetLastOrderedGp(), q.GetStableGp(), q.GetUnordered())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Every position below stable-gp is final and readable.
	fmt.Fprintf(w, "stable-gp  %d\n", stable)
	return nil
}
