package auth

import (
	"fmt"
	"testing"

	pb "github.com/augur-log/augur/api/augurpb"
)

// TestEveryMethodHasAPermission keeps the table whole: a method missing
// from Methods is refused to every caller, so an RPC added to augur.proto
// without an entry would fail on every cluster, secure or not.
func TestEveryMethodHasAPermission(t *testing.T) {
	services := pb.File_augur_proto.Services()
	for i := range services.Len() {
		sd := services.Get(i)
		methods := sd.Methods()
		for j := range methods.Len() {
			name := fmt.Sprintf("/%s/%s", sd.FullName(), methods.Get(j).Name())
			if _, ok := Methods[name]; !ok {
				t.Errorf("%s has no entry in auth.Methods", name)
			}
		}
	}
}
