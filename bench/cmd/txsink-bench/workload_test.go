package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestRowJSON: the hand-written value is byte for byte what encoding/json
// writes, and is valueBytes long whenever the id and seq leave room.
func TestRowJSON(t *testing.T) {
	for _, c := range []struct {
		seq        int64
		valueBytes int
	}{{1, 100}, {99999, 100}, {1234567, 1000}, {5, 10}, {42, 5000}} {
		r := makeRow(c.seq, c.valueBytes)
		want, err := json.Marshal(struct {
			ID   string `json:"id"`
			Seq  int64  `json:"seq"`
			Body string `json:"body"`
		}{r.ID, r.Seq, r.Body})
		if err != nil {
			t.Fatal(err)
		}
		got := r.json()
		if !bytes.Equal(got, want) {
			t.Errorf("row %d: %s, encoding/json %s", c.seq, got, want)
		}
		if min := 26 + 2*len(r.ID) - 1; c.valueBytes >= min && len(got) != c.valueBytes {
			t.Errorf("row %d: %d bytes, want %d", c.seq, len(got), c.valueBytes)
		}
	}
}
