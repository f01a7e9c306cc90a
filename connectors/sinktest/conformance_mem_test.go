package sinktest

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/txsink/txsink/connectors"
)

// TestConformanceMemSink runs the conformance suite on the in-memory sink,
// so the sink the driver tests use keeps the contract the real sinks keep.
func TestConformanceMemSink(t *testing.T) {
	var n atomic.Int64
	Conformance(t, func(t *testing.T) Harness {
		store := NewStore()
		conn := fmt.Sprintf("mem-%d", n.Add(1))
		return Harness{
			Connector: conn,
			Open:      func(t *testing.T) connectors.Sink { return store.Open(conn) },
			NewTopic: func(t *testing.T, partitions int32) string {
				return fmt.Sprintf("topic-%d", n.Add(1))
			},
			IDs: func(t *testing.T, topic string) []string {
				var ids []string
				for _, r := range store.Rows() {
					if r.Topic != topic {
						continue
					}
					var v struct{ ID string }
					if err := json.Unmarshal(r.Value, &v); err != nil {
						t.Fatalf("row %s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err)
					}
					ids = append(ids, v.ID)
				}
				return ids
			},
			Local:  LocalModes,
			Stager: true,
		}
	})
}
