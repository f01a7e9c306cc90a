package engine

// The record pool: franz-go decodes each fetched record batch into a slice
// of kgo.Record, 160-odd bytes a record with pointers the garbage
// collector scans. On the main workload those slices were the largest
// allocation of the whole consume path (bench/results/2026-12-07-round3,
// heap_exactly_once.pprof: more than the fetch buffers themselves). With
// a kgo.PoolRecords the client takes the slices from the pool, and a
// slice goes back once every record kept from it was recycled
// (kgo.Record.Recycle).
//
// A record is recycled only when nothing can read it again: the driver
// recycles the records of a round's batches that committed, and are not
// in doubt, after the round ended (every participant call returned, the
// dead letters were produced) and the machine took its result (it reads
// a batch's records only to cut it or to run a failed batch again). Every
// other record (a cancelled poll's, a stale or failed batch's, one given
// back to the broker by a seek) is simply left to the garbage collector,
// as without a pool: its slice never returns to the pool. Recycling is an
// optimisation that may be skipped, never a duty.
//
// The keys' and values' bytes are not pooled (no kgo.PoolDecompressBytes):
// rows share them (a ClickHouse String, a PostgreSQL text value) and
// franz-go would zero them when the last record of their batch is
// recycled, which the rows may outlive (a batch prepared ahead, a
// ClickHouse round's blocks).

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/twophase"
)

// recordPool is a kgo.PoolRecords: free slices of records in size
// classes of powers of two, at most maxBytes of them in all. It is a
// bounded free list rather than a sync.Pool: a sync.Pool is emptied by
// every garbage collection, and a task under the memory budget collects
// often enough that most slices were gone before the next fetch asked
// (a 2 M-record drain: 30 % of the gets missed).
type recordPool struct {
	mu       sync.Mutex
	free     [recordClasses][]*[]kgo.Record
	bytes    int // of the free slices
	maxBytes int
	// puts counts the slices taken back (tests read it).
	puts atomic.Int64
}

const (
	// minRecordClass is the smallest class, 2^4 records: a batch of one
	// record takes a slice of 16 (2.6 KB), as small batches come in bulk.
	minRecordClass = 4
	// recordClasses bounds the classes: a batch of more than 2^20
	// records (more than Kafka's default message.max.bytes allows at 1
	// byte a record) is not pooled.
	recordClasses = 21
	// recordPoolBytes bounds the free slices the process keeps: about
	// two rounds of the main workload's fetch batches.
	recordPoolBytes = 16 << 20
	recordSize      = int(unsafe.Sizeof(kgo.Record{}))
)

// records is the process's pool, shared by every task's client.
var records = &recordPool{maxBytes: recordPoolBytes}

// recycled counts the pooled records recycled (tests read it).
var recycled atomic.Int64

// recordClass returns the class of a slice of capacity n, and whether it
// is pooled.
func recordClass(n int) (int, bool) {
	c := max(bits.Len(uint(max(n, 1)-1)), minRecordClass)
	return c, c < recordClasses
}

// GetRecords implements kgo.PoolRecords: a slice of at least n records.
func (p *recordPool) GetRecords(n int) []kgo.Record {
	c, ok := recordClass(n)
	if !ok {
		return make([]kgo.Record, 0, n)
	}
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		s := p.free[c][k-1]
		p.free[c][k-1] = nil
		p.free[c] = p.free[c][:k-1]
		p.bytes -= cap(*s) * recordSize
		p.mu.Unlock()
		return (*s)[:0]
	}
	p.mu.Unlock()
	return make([]kgo.Record, 0, 1<<c)
}

// PutRecords implements kgo.PoolRecords. The client zeroed every record
// (Recycle) before it puts the slice back.
func (p *recordPool) PutRecords(s []kgo.Record) {
	n := cap(s)
	c, ok := recordClass(n)
	if !ok || n != 1<<c {
		return // not one of ours (franz-go grew it): the collector takes it
	}
	p.puts.Add(1)
	size := n * recordSize
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bytes+size > p.maxBytes {
		return // full: the collector takes it
	}
	s = s[:0]
	p.free[c] = append(p.free[c], &s)
	p.bytes += size
}

// recycle recycles the records of the batches of a finished round that
// committed and are not in doubt (see the file comment). Records not taken
// from a pool are left alone by kgo.Record.Recycle.
func recycle(batches []*twophase.Batch, committed, inDoubt []twophase.BatchID) {
	if len(committed) == 0 {
		return
	}
	done := make(map[twophase.BatchID]bool, len(committed))
	for _, id := range committed {
		done[id] = true
	}
	for _, id := range inDoubt {
		delete(done, id)
	}
	for _, b := range batches {
		if !done[b.ID] {
			continue
		}
		delete(done, b.ID) // a batch listed twice is recycled once
		n := 0
		for _, r := range b.Records {
			if r.Context != nil {
				n++
			}
			r.Recycle()
		}
		recycled.Add(int64(n))
	}
}
