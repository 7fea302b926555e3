package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/augur-log/augur/internal/devcluster"
)

// Durability settings an embedded cluster can run under, for
// Params.Durability.
const (
	// DurabilityDefault is the cluster file's default: fsync group and
	// raft_fsync true, so an acknowledged append survives a power loss of
	// every server.
	DurabilityDefault = "default"
	// DurabilityOptOut is the documented opt-out: fsync interval and
	// raft_fsync false, so an append is acknowledged from the page cache.
	DurabilityOptOut = "optout"
)

// durabilityNames lists the settings Params.Durability takes.
var durabilityNames = []string{DurabilityDefault, DurabilityOptOut}

// checkDurability checks p.Durability.
func (p Params) checkDurability() error {
	if len(p.Durability) == 0 {
		return nil
	}
	var errs []error
	for _, d := range p.Durability {
		if !slices.Contains(durabilityNames, d) {
			errs = append(errs, fmt.Errorf("durability %q is not one of %s", d, strings.Join(durabilityNames, ", ")))
		}
	}
	if dup := firstDuplicate(p.Durability); dup != nil {
		errs = append(errs, fmt.Errorf("durability %s is named twice", *dup))
	}
	if p.Fsync != "" {
		errs = append(errs, errors.New("durability sets the fsync policy: give it or fsync, not both"))
	}
	if p.Cluster != nil {
		errs = append(errs, errors.New("durability shapes the embedded cluster; a running cluster's file decides"))
	}
	return errors.Join(errs...)
}

// applyDurability sets an embedded cluster's sync settings to durability
// d ("" leaves them as Params.Fsync and the defaults say).
func applyDurability(o *devcluster.Options, d string) {
	switch d {
	case DurabilityDefault:
		o.Fsync, o.NoRaftFsync = "", false
	case DurabilityOptOut:
		o.Fsync, o.NoRaftFsync = "interval", true
	}
}
