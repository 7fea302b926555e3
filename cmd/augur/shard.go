package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/augur-log/augur/client"
	"strconv"

	"github.com/spf13/cobra"
)

func newShardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shard",
		Short: "Add or finalize shards",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return fmt.Errorf("%s needs a subcommand: add or finalize", cmd.CommandPath())
		},
	}
	cmd.AddCommand(newShardAddCmd(), newShardFinalizeCmd())
	return cmd
}

func newShardAddCmd() *cobra.Command {
	var (
		cf    connFlags
		group string
	)
	cmd := &cobra.Command{
		Use:   "add --group G",
		Short: "Ask group G's primary to open another live shard; prints its id",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group == "" {
				return errors.New("--group is required")
			}
			t, err := cf.resolve()
			if err != nil {
				return err
			}
			if t.file != nil && len(t.file.Group(group)) == 0 {
				return fmt.Errorf("group %q is not in the cluster file (groups: %v)", group, t.file.Groups())
			}
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				id, err := cl.AddShard(ctx, group)
				if err != nil {
					return fmt.Errorf("add a shard to group %q: %w", group, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&group, "group", "", "storage group to add a shard to")
	return cmd
}

func newShardFinalizeCmd() *cobra.Command {
	var (
		cf    connFlags
		grace uint64
	)
	cmd := &cobra.Command{
		Use:   "finalize ID",
		Short: "Stop shard ID taking appends after --grace more cuts; it stays readable",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil {
				return fmt.Errorf("shard id %q is not a non-negative 32-bit integer", args[0])
			}
			shard := uint32(v)
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				st, err := cl.Status(ctx)
				if err != nil {
					return fmt.Errorf("status: %w", err)
				}
				if err := checkLiveShard(st, shard); err != nil {
					return fmt.Errorf("cannot finalize: %w", err)
				}
				if err := cl.FinalizeShard(ctx, shard, grace); err != nil {
					return fmt.Errorf("finalize shard %d: %w", shard, err)
				}
				if grace == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "shard %d is finalized; it stays readable\n", shard)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "shard %d is finalizing; it takes appends for %d more cuts\n", shard, grace)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().Uint64Var(&grace, "grace", 0, "how many more cuts may still order the shard's records")
	return cmd
}
