package engine

// RecordPoolCounts returns how many pooled records the drivers recycled
// and how many record slices went back to the pool, since the process
// started.
func RecordPoolCounts() (recycledRecords, slicesPut int64) {
	return recycled.Load(), records.puts.Load()
}
