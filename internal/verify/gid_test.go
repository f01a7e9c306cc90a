package verify

import (
	"strings"
	"testing"

	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/twophase"
)

// TestGIDPrefix: the prefix the checker looks for is the one the sink
// writes.
func TestGIDPrefix(t *testing.T) {
	if TxsinkGIDPrefix != postgres.GIDPrefix || TxsinkRoundGIDPrefix != postgres.RoundGIDPrefix {
		t.Fatalf("prefixes %q and %q, sink uses %q and %q", TxsinkGIDPrefix, TxsinkRoundGIDPrefix, postgres.GIDPrefix, postgres.RoundGIDPrefix)
	}
	for _, c := range []string{"orders-sink", "c", "chaos-eo-1-fb071e8e"} {
		gid := postgres.GID(twophase.BatchID{Connector: c, Topic: "t", Partition: 3, First: 10, Last: 20})
		if !strings.HasPrefix(gid, GIDPrefix(c)) {
			t.Errorf("gid %s does not start with GIDPrefix(%q) = %s", gid, c, GIDPrefix(c))
		}
		if strings.HasPrefix(gid, GIDPrefix(c+"x")) {
			t.Errorf("gid %s matches another connector's prefix", gid)
		}
		rgid := postgres.RoundGID(c, []twophase.BatchID{{Connector: c, Topic: "t", Partition: 3, First: 10, Last: 20}, {Connector: c, Topic: "t", Partition: 4, First: 0, Last: 5}})
		if !strings.HasPrefix(rgid, RoundGIDPrefix(c)) || strings.HasPrefix(rgid, RoundGIDPrefix(c+"x")) {
			t.Errorf("round gid %s: want the prefix %s and no other connector's", rgid, RoundGIDPrefix(c))
		}
	}
}
