package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	pb "github.com/augur-log/augur/api/augurpb"
	"github.com/augur-log/augur/client"
)

// Bounds of the record commands.
const (
	// stdinBytesMax bounds what `augur append` reads from stdin before it
	// appends anything (it checks every line first).
	stdinBytesMax = 256 << 20
	// readCountMax bounds `augur read --n`.
	readCountMax = 100_000
	// answersAfterStopGrace is how long `augur append`, once stopped, still
	// takes the answers the client gives right away to the appends it
	// could not place: they say why (no live shard), where giving up on
	// them could only say "unanswered".
	answersAfterStopGrace = 100 * time.Millisecond
)

func newAppendCmd() *cobra.Command {
	var (
		cf    connFlags
		key   string
		tags  []string
		shard uint32
	)
	cmd := &cobra.Command{
		Use:   "append [DATA]",
		Short: "Append DATA, or each line of stdin, as a record; prints 'position shard' per record",
		Long: `Append DATA as one record, or, without DATA, each line of stdin as one record.
Prints 'position shard' for each record, in input order. A cluster in lazy
order acknowledges an append before it orders it: the position is then '-',
and read and subscribe show the record once it is ordered.

Every record is checked before the first is sent (empty or oversized records,
unknown or finalized --shard), so bad input appends nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := cf.resolve()
			if err != nil {
				return err
			}
			var payloads [][]byte
			if len(args) == 1 {
				payloads = [][]byte{[]byte(args[0])}
			} else if payloads, err = readLines(cmd.InOrStdin()); err != nil {
				return err
			}
			// The limit covers the key and tags too, as the servers count it.
			overhead := len(key)
			for _, tag := range tags {
				overhead += len(tag)
			}
			if err := checkPayloads(payloads, t.recordBytesMax()-overhead, len(args) == 0); err != nil {
				return err
			}
			for _, tag := range tags {
				if tag == "" {
					return errors.New("--tag: empty tag")
				}
			}
			if key != "" {
				// Records with one key go to one shard, in order.
				cf.placement = client.ByKey
			}
			ctx := cmd.Context()
			cl, _, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer cl.Close()
			recs := make([]client.Record, len(payloads))
			for i, p := range payloads {
				recs[i] = client.Record{Key: key, Tags: tags, Payload: p}
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if cmd.Flags().Changed("shard") {
				return appendToShard(ctx, cl, cf.timeout, shard, recs, out)
			}
			return appendPlaced(ctx, cl, cf.timeout, recs, out)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&key, "key", "", "record key; records with the same key go to the same shard")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "record tag; repeat for several")
	cmd.Flags().Uint32Var(&shard, "shard", 0, "append to this shard instead of letting the client place records")
	return cmd
}

// readLines reads all of r, at most stdinBytesMax, as lines.
func readLines(r io.Reader) ([][]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, stdinBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(data) > stdinBytesMax {
		return nil, fmt.Errorf("stdin holds more than %d MiB; split it over several appends", stdinBytesMax>>20)
	}
	if len(data) == 0 {
		return nil, errors.New("nothing to append: give DATA or records on stdin, one per line")
	}
	text := strings.TrimSuffix(string(data), "\n")
	var lines [][]byte
	for l := range strings.SplitSeq(text, "\n") {
		lines = append(lines, []byte(strings.TrimSuffix(l, "\r")))
	}
	return lines, nil
}

func checkPayloads(payloads [][]byte, limit int, fromStdin bool) error {
	what := func(i int) string {
		if fromStdin {
			return fmt.Sprintf("line %d", i+1)
		}
		return "DATA"
	}
	for i, p := range payloads {
		switch {
		case len(p) == 0:
			return fmt.Errorf("%s is empty: empty records are invalid; nothing was appended", what(i))
		case len(p) > limit:
			return fmt.Errorf("%s is %d bytes, over the %d the cluster's record_bytes_max leaves with this key and tags; nothing was appended", what(i), len(p), limit)
		}
	}
	return nil
}

// appendPlaced pipelines recs through the client's placement and prints
// their acks in input order. It stops waiting when ctx ends (--timeout,
// SIGINT, SIGTERM), whether or not every append was answered.
func appendPlaced(ctx context.Context, cl *client.Client, timeout time.Duration, recs []client.Record, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		i   int
		ack client.Ack
		err error
	}
	// answers holds every answer, so a late one never blocks the client.
	answers := make(chan result, len(recs))
	for i, r := range recs {
		cl.AppendAsync(ctx, r, func(a client.Ack, err error) { answers <- result{i, a, err} })
	}
	results := make([]result, len(recs))
	answered := make([]bool, len(recs))
	take := func(r result) {
		results[r.i] = r
		answered[r.i] = true
	}
	var grace <-chan time.Time
	for n := 0; n < len(recs); n++ {
		select {
		case r := <-answers:
			take(r)
			continue
		case <-ctx.Done():
		}
		// The client answers at once the appends it could not place, with
		// the reason; take those before giving up on the rest.
		if grace == nil {
			grace = time.After(answersAfterStopGrace)
		}
		select {
		case r := <-answers:
			take(r)
			continue
		case <-grace:
		}
		break
	}
	var errs []error
	for i, r := range results {
		switch {
		case !answered[i]:
			errs = append(errs, fmt.Errorf("record %d: unanswered when the command stopped; it may still be ordered: %w", i+1, context.Cause(ctx)))
		case r.err != nil:
			errs = append(errs, fmt.Errorf("record %d: %w", i+1, r.err))
		default:
			printAck(out, r.ack)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d appends failed: %w", len(errs), len(recs), errors.Join(errs...))
	}
	return nil
}

// appendToShard appends recs one by one to shard after checking that it is
// live, stopping at the first failure.
func appendToShard(ctx context.Context, cl *client.Client, timeout time.Duration, shard uint32, recs []client.Record, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if err := checkLiveShard(st, shard); err != nil {
		return fmt.Errorf("--shard: %w; nothing was appended", err)
	}
	for i, r := range recs {
		a, err := cl.AppendToShard(ctx, r, shard)
		if err != nil {
			return fmt.Errorf("record %d of %d: append to shard %d: %w", i+1, len(recs), shard, err)
		}
		printAck(out, a)
	}
	return nil
}

// printAck prints an append's position and shard; '-' for the position of
// one acknowledged before it was ordered (lazy order).
func printAck(out io.Writer, a client.Ack) {
	if a.Unordered {
		fmt.Fprintf(out, "- %d\n", a.Shard)
		return
	}
	fmt.Fprintf(out, "%d %d\n", a.Position, a.Shard)
}

// checkLiveShard tells whether shard exists and takes appends.
func checkLiveShard(st *pb.StatusResponse, shard uint32) error {
	var ids []string
	for _, sh := range st.Shards {
		if sh.Id == shard {
			if sh.State != pb.ShardState_SHARD_LIVE {
				return fmt.Errorf("shard %d is %s and takes no appends", shard, shardState(sh.State))
			}
			return nil
		}
		ids = append(ids, strconv.FormatUint(uint64(sh.Id), 10))
	}
	return fmt.Errorf("shard %d does not exist (shards: %s)", shard, strings.Join(ids, " "))
}

func newReadCmd() *cobra.Command {
	var (
		cf   connFlags
		n    int
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "read POS",
		Short: "Print the records from position POS on: 'position shard key payload' per line",
		Long: `Print the records at the N positions from position POS on, one per line,
tab-separated: position, shard, key, payload (as text if it is printable,
else Go-quoted). In speculative mode positions that hold no-ops print
nothing, and reading one position that holds a no-op is an error.

Without --wait, reading past the tail is an error and a range that crosses
the tail stops there; with --wait, read waits (up to --timeout) for
positions not yet ordered.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, err := parsePosition(args[0])
			if err != nil {
				return err
			}
			if n < 1 || n > readCountMax {
				return fmt.Errorf("--n must be in [1, %d], got %d", readCountMax, n)
			}
			// One position asked for: a no-op there (speculative mode) is
			// an answer to report, not a record to skip.
			onePosition := n == 1
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				if !wait {
					tail, err := cl.CheckTail(ctx)
					if err != nil {
						return fmt.Errorf("check tail: %w", err)
					}
					if pos >= tail {
						return fmt.Errorf("position %d is not written yet (the tail is %d); --wait waits for it", pos, tail)
					}
					n = int(min(uint64(n), tail-pos))
				}
				entries, err := readEntries(ctx, cl, pos, n, onePosition)
				if err != nil {
					return err
				}
				out := bufio.NewWriter(cmd.OutOrStdout())
				defer out.Flush()
				for _, e := range entries {
					printEntry(out, e)
				}
				return nil
			})
		},
	}
	cf.register(cmd)
	cmd.Flags().IntVar(&n, "n", 1, "number of records to read")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait (up to --timeout) for positions not yet ordered")
	return cmd
}

// readEntries reads the n positions from pos on; with onePosition (n is 1)
// a no-op at pos is an error (ErrNoop).
func readEntries(ctx context.Context, cl *client.Client, pos uint64, n int, onePosition bool) ([]client.Entry, error) {
	if onePosition {
		e, err := cl.Read(ctx, pos)
		if err != nil {
			return nil, fmt.Errorf("read position %d: %w", pos, err)
		}
		return []client.Entry{e}, nil
	}
	entries, err := cl.ReadRange(ctx, pos, n)
	if err != nil {
		return nil, fmt.Errorf("read from position %d: %w", pos, err)
	}
	return entries, nil
}

func newSubscribeCmd() *cobra.Command {
	var (
		cf    connFlags
		from  uint64
		keys  []string
		tags  []string
		n     int
		spec  bool
		shard uint32
	)
	cmd := &cobra.Command{
		Use:   "subscribe",
		Short: "Follow the log like tail -f: 'position shard key payload' per record",
		Long: `Follow the log from --from on, printing each record as it is ordered, one per
line, tab-separated: position, shard, key, payload (as text if printable, else
Go-quoted). --key and --tag filter (a record matches when its key is one of
the keys, if any, and it carries one of the tags, if any). --shard follows
one shard alone: its records print as soon as that shard has them, without
waiting for other shards' positions in between. Stops on Ctrl-C or after --n
records.

With --speculative (clusters in mode spec) records print as soon as they are
durable, marked "spec" in a fifth column while their position is a
prediction, and the stream also prints "confirm K" when positions below K
that were printed as predictions are final, and "fail K" (positions from K
on are void; the correct records follow).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n < 0 {
				return fmt.Errorf("--n must not be negative, got %d", n)
			}
			ctx := cmd.Context()
			cl, _, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer cl.Close()
			f := client.Filter{Keys: keys, Tags: tags}
			if cmd.Flags().Changed("shard") {
				f.Shard = &shard
			}
			if spec {
				return followSpec(ctx, cmd.OutOrStdout(), cl, from, f, n)
			}
			sub, err := cl.Subscribe(ctx, from, f)
			if err != nil {
				if interrupted(ctx, err) {
					return nil
				}
				return fmt.Errorf("subscribe from %d: %w", from, err)
			}
			defer sub.Close()
			out := cmd.OutOrStdout()
			for i := 0; n == 0 || i < n; i++ {
				e, err := sub.Next(ctx)
				if err != nil {
					if interrupted(ctx, err) {
						return nil
					}
					return fmt.Errorf("subscription: %w", err)
				}
				printEntry(out, e)
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().Uint64Var(&from, "from", 0, "first position")
	cmd.Flags().StringArrayVar(&keys, "key", nil, "only records with this key; repeat for several")
	cmd.Flags().StringArrayVar(&tags, "tag", nil, "only records with this tag; repeat for several")
	cmd.Flags().Uint32Var(&shard, "shard", 0, "follow this shard alone")
	cmd.Flags().IntVar(&n, "n", 0, "stop after this many records (0: run until interrupted)")
	cmd.Flags().BoolVar(&spec, "speculative", false, "deliver records before their cut, with confirm and fail lines (mode spec)")
	return cmd
}

// followSpec prints a speculative subscription until n records (0: until
// interrupted).
func followSpec(ctx context.Context, out io.Writer, cl *client.Client, from uint64, f client.Filter, n int) error {
	sub, err := cl.SubscribeSpec(ctx, from, f, false)
	if err != nil {
		if interrupted(ctx, err) {
			return nil
		}
		return fmt.Errorf("subscribe from %d: %w", from, err)
	}
	defer sub.Close()
	// unconfirmed holds the positions printed as predictions: only a
	// confirmation of one of them is news.
	var unconfirmed []uint64
	for i := 0; n == 0 || i < n; {
		ev, err := sub.Next(ctx)
		if err != nil {
			if interrupted(ctx, err) {
				return nil
			}
			return fmt.Errorf("subscription: %w", err)
		}
		switch ev.Kind {
		case client.EventConfirm:
			if len(unconfirmed) > 0 && unconfirmed[0] < ev.Position {
				fmt.Fprintf(out, "confirm %d\n", ev.Position)
			}
			for len(unconfirmed) > 0 && unconfirmed[0] < ev.Position {
				unconfirmed = unconfirmed[1:]
			}
		case client.EventFail:
			fmt.Fprintf(out, "fail %d\n", ev.Position)
			for len(unconfirmed) > 0 && unconfirmed[len(unconfirmed)-1] >= ev.Position {
				unconfirmed = unconfirmed[:len(unconfirmed)-1]
			}
		case client.EventDeliver:
			if ev.Speculative {
				unconfirmed = append(unconfirmed, ev.Entry.Position)
				fmt.Fprintf(out, "%s\tspec\n", entryLine(ev.Entry))
			} else {
				printEntry(out, ev.Entry)
			}
			i++
		}
	}
	return nil
}

func newTailCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the next position to be assigned (CheckTail)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				tail, err := cl.CheckTail(ctx)
				if err != nil {
					return fmt.Errorf("check tail: %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), tail)
				return nil
			})
		},
	}
	cf.register(cmd)
	return cmd
}

func newTrimCmd() *cobra.Command {
	var cf connFlags
	cmd := &cobra.Command{
		Use:   "trim POS",
		Short: "Discard the records below position POS on every server",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, err := parsePosition(args[0])
			if err != nil {
				return err
			}
			return cf.call(cmd.Context(), func(ctx context.Context, cl *client.Client) error {
				tail, err := cl.CheckTail(ctx)
				if err != nil {
					return fmt.Errorf("check tail: %w", err)
				}
				if pos > tail {
					return fmt.Errorf("cannot trim to %d: beyond the tail %d; nothing was trimmed", pos, tail)
				}
				if err := cl.Trim(ctx, pos); err != nil {
					return fmt.Errorf("trim to %d: %w", pos, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "trimmed below %d\n", pos)
				return nil
			})
		},
	}
	cf.register(cmd)
	return cmd
}

// parsePosition parses a log position.
func parsePosition(s string) (uint64, error) {
	p, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		if strings.HasPrefix(s, "-") {
			return 0, fmt.Errorf("position %q is negative; positions start at 0", s)
		}
		return 0, fmt.Errorf("position %q is not a non-negative integer", s)
	}
	return p, nil
}

// printEntry writes one record as position, shard, key and payload,
// tab-separated.
func printEntry(w io.Writer, e client.Entry) {
	fmt.Fprintln(w, entryLine(e))
}

// entryLine is one record as the CLI prints it: position, shard, key,
// payload, tab-separated.
func entryLine(e client.Entry) string {
	return fmt.Sprintf("%d\t%d\t%s\t%s", e.Position, e.Shard, text(e.Record.Key), text(string(e.Record.Payload)))
}

// text returns s as is when it is printable UTF-8 without tabs or line
// breaks, and Go-quoted otherwise, so one record stays on one line.
func text(s string) string {
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	if strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	return s
}
