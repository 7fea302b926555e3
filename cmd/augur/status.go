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
				return printStatus(cmd.OutOrStdout(), st)
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
