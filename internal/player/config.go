package player

import (
	"errors"
	"fmt"
)

// Index is a log position plus one, so that zero can mean "nothing applied
// yet", as in the paper where indices start at 1.
type Index uint64

// Term counts the connections of one target: it starts at 1 and grows on
// every reconnect. Anything pushed, written or acknowledged under an older
// term belongs to a dead connection and is dropped.
type Term uint64

// TargetID numbers the targets of a Config: it is the position of the
// target's name in Config.Targets.
type TargetID int

// Defaults for the named bounds, used by Config.WithDefaults.
const (
	// DefaultBatchEntriesMax keeps one batch small enough that a target
	// applies it in one short transaction.
	DefaultBatchEntriesMax = 256
	// DefaultBatchBytesMax keeps one Apply message well under gRPC's default
	// 4 MiB receive limit.
	DefaultBatchBytesMax = 1 << 20
	// DefaultQueueEntriesMax bounds each of a target's two queues; at 2,000
	// entries/s it is about two seconds of backlog before the fetcher waits.
	DefaultQueueEntriesMax = 4096
	// DefaultQueueBytesMax bounds the payload bytes held by each of a
	// target's two queues.
	DefaultQueueBytesMax = 64 << 20
	// DefaultInflightBatchesMax bounds the batches sent to one target and not
	// yet acknowledged, so a target that stops acknowledging stops receiving
	// instead of growing the player's memory.
	DefaultInflightBatchesMax = 16
	// DefaultEmptyEvery sends an empty entry to idle targets every 1,024
	// main-stream entries, so a recovery never starts further back than that.
	DefaultEmptyEvery = 1024
)

// Config is what the core needs to know; the server reads it from the
// player's configuration file.
type Config struct {
	// Targets names the targets; a TargetID is an index into it. Routing by
	// key hash depends on the number and order of targets, so changing them
	// changes where keys go.
	Targets []string
	// Route picks each entry's targets.
	Route Route
	// BatchEntriesMax bounds the messages in one batch.
	BatchEntriesMax int
	// BatchBytesMax bounds the message bytes in one batch; a single message
	// larger than it still goes alone.
	BatchBytesMax int
	// QueueEntriesMax bounds the messages in each of a target's normal and
	// catch-up queues; a full queue makes its fetcher wait.
	QueueEntriesMax int
	// QueueBytesMax bounds the message bytes in each queue; a queue may
	// exceed it by at most one message, the one that filled it.
	QueueBytesMax int
	// InflightBatchesMax bounds the batches sent to a target and not yet
	// acknowledged (the paper's popped map).
	InflightBatchesMax int
	// EmptyEvery is the paper's E: after every EmptyEvery main-stream
	// entries, each target that had nothing to apply in the last EmptyEvery
	// entries gets an empty message that advances its last applied index.
	// Zero turns empty messages off.
	EmptyEvery uint64
}

// WithDefaults returns c with every zero bound set to its default.
func (c Config) WithDefaults() Config {
	if c.BatchEntriesMax == 0 {
		c.BatchEntriesMax = DefaultBatchEntriesMax
	}
	if c.BatchBytesMax == 0 {
		c.BatchBytesMax = DefaultBatchBytesMax
	}
	if c.QueueEntriesMax == 0 {
		c.QueueEntriesMax = DefaultQueueEntriesMax
	}
	if c.QueueBytesMax == 0 {
		c.QueueBytesMax = DefaultQueueBytesMax
	}
	if c.InflightBatchesMax == 0 {
		c.InflightBatchesMax = DefaultInflightBatchesMax
	}
	if c.EmptyEvery == 0 {
		c.EmptyEvery = DefaultEmptyEvery
	}
	return c
}

// Validate checks every bound together.
func (c Config) Validate() error {
	var errs []error
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("no targets"))
	}
	seen := map[string]bool{}
	for _, name := range c.Targets {
		if name == "" {
			errs = append(errs, errors.New("a target has an empty name"))
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("target %q listed twice", name))
		}
		seen[name] = true
	}
	if c.Route > RouteAll {
		errs = append(errs, fmt.Errorf("unknown route %d", c.Route))
	}
	for _, b := range []struct {
		name string
		v    int
	}{
		{"BatchEntriesMax", c.BatchEntriesMax},
		{"BatchBytesMax", c.BatchBytesMax},
		{"QueueEntriesMax", c.QueueEntriesMax},
		{"QueueBytesMax", c.QueueBytesMax},
		{"InflightBatchesMax", c.InflightBatchesMax},
	} {
		if b.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, not %d", b.name, b.v))
		}
	}
	return errors.Join(errs...)
}
