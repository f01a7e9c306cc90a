// Package cluster holds the tests of txsink's distributed mode on the real
// broker and database: several "txsink serve" workers sharing connectors
// through Kafka (docs/cluster.md). The tests share one Kafka and one
// PostgreSQL (harness.Main); each test has its own cluster (group.id,
// topics), database and connector.
package cluster

import (
	"os"
	"testing"

	"github.com/txsink/txsink/integration/harness"
)

func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}
