package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Security settings an embedded cluster can run under, for
// Params.Security. Without Params.Security an embedded cluster runs
// insecure, so results stay comparable with earlier runs.
const (
	// SecurityTLS: TLS on every connection, servers and the benchmark's
	// clients authenticated by certificate (augur dev's default).
	SecurityTLS = "tls"
	// SecurityInsecure: plaintext (insecure: true).
	SecurityInsecure = "insecure"
)

// securityNames lists the settings Params.Security takes.
var securityNames = []string{SecurityInsecure, SecurityTLS}

// checkSecurity checks p.Security.
func (p Params) checkSecurity() error {
	if len(p.Security) == 0 {
		return nil
	}
	var errs []error
	for _, s := range p.Security {
		if !slices.Contains(securityNames, s) {
			errs = append(errs, fmt.Errorf("security %q is not one of %s", s, strings.Join(securityNames, ", ")))
		}
	}
	if dup := firstDuplicate(p.Security); dup != nil {
		errs = append(errs, fmt.Errorf("security %s is named twice", *dup))
	}
	if p.Cluster != nil {
		errs = append(errs, errors.New("security shapes the embedded cluster; a running cluster's file decides"))
	}
	if len(p.Emulate) > 0 && slices.Contains(p.Security, SecurityTLS) {
		errs = append(errs, errors.New("emulated shards have no server certificates: security tls does not go with emulate"))
	}
	return errors.Join(errs...)
}
