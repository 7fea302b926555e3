package main

import (
	"context"
	"fmt"
	"github.com/augur-log/augur/client"
	"io"
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
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Status(ctx)
				if err != nil {
					return fmt.Errorf("status: %w", err)
				}
				if asJSON {
					data, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(st)
					if err != nil {
						return fmt.Errorf("encode status: %w", err)
					}
					_, err = fmt.Fprintln(cmd.OutOrStdout(), string(data))
					return err
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
		if m.Leader {
			role = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Id, m.Addr, role)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tGROUP\tSTATE\tLENGTH\tADDED AT CUT\tREPLICAS (primary first)")
	for _, sh := range st.Shards {
		state := shardState(sh.State)
		switch {
		case sh.State == pb.ShardState_SHARD_FINALIZING:
			state += fmt.Sprintf(" (until cut %d)", sh.FinalCut)
		case sh.State == pb.ShardState_SHARD_FINALIZED && sh.Failed:
			state += " (replica failed)"
		}
		var reps []string
		for _, r := range sh.Replicas {
			reps = append(reps, r.Id+"@"+r.Addr)
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", sh.Id, sh.Group, state, length, sh.AddedCut, strings.Join(reps, " "))
	}
	if len(st.Shards) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t")
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
	return nil
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
		for _, r := range sh.Replicas {
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
	fmt.Fprintln(tw, "SHARD\tREPLICA\tCOPY")
	for _, sh := range st.Shards {
		for _, r := range sh.Replicas {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", sh.Id, r.Id, copyState(sh.Id, answers[r.Addr]))
		}
	}
	if len(st.Shards) == 0 {
		fmt.Fprintln(tw, "(none)\t\t")
	}
	return tw.Flush()
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
		if len(parts) == 0 {
			return "ok"
		}
		return strings.Join(parts, "; ")
	}
	return "not held"
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
