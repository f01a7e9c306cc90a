package integration

import (
	"os"
	"testing"

	"github.com/txsink/txsink/integration/harness"
)

// TestMain shares one Kafka, PostgreSQL and ClickHouse among the tests of
// this package and terminates them at the end.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}
