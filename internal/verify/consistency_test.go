package verify

import (
	"strings"
	"testing"
)

// A source history of three transactions over two tables, and target
// samples: each prefix's state is consistent, a state holding part of a
// transaction is torn, and the report names that transaction.
func TestConsistencyCheck(t *testing.T) {
	h := newHistory()
	for i, id := range []string{"10", "11", "12"} {
		h.ids = append(h.ids, id)
		h.order[id] = i + 1
	}
	v := func(lsn int64, txn string, del bool) rowVersion { return rowVersion{lsn: lsn, txn: txn, deleted: del} }
	// accounts 1 and 2 exist from the snapshot; 10 moves money between
	// them and records transfer 1; 11 records transfer 2 and updates
	// account 1; 12 deletes transfer 1.
	h.versions[rowKey{"accounts", "1"}] = []rowVersion{v(1, "", false), v(100, "10", false), v(110, "11", false)}
	h.versions[rowKey{"accounts", "2"}] = []rowVersion{v(2, "", false), v(101, "10", false)}
	h.versions[rowKey{"transfers", "1"}] = []rowVersion{v(102, "10", false), v(120, "12", true)}
	h.versions[rowKey{"transfers", "2"}] = []rowVersion{v(111, "11", false)}

	type sample = map[string]map[string]int64
	for _, c := range []struct {
		name   string
		s      sample
		prefix int
		torn   string // the transaction a torn sample names
		detail string
	}{
		{"snapshot", sample{"accounts": {"1": 1, "2": 2}, "transfers": {}}, 0, "", ""},
		{"after 10", sample{"accounts": {"1": 100, "2": 101}, "transfers": {"1": 102}}, 1, "", ""},
		{"after 11", sample{"accounts": {"1": 110, "2": 101}, "transfers": {"1": 102, "2": 111}}, 2, "", ""},
		{"after 12", sample{"accounts": {"1": 110, "2": 101}, "transfers": {"2": 111}}, 3, "", ""},
		{"only one table compared", sample{"accounts": {"1": 110, "2": 101}}, 2, "", ""},
		{"10 without its transfer", sample{"accounts": {"1": 100, "2": 101}, "transfers": {}}, 0, "10", "lacks the row written by the transaction committed 1"},
		{"10 with one account", sample{"accounts": {"1": 100, "2": 2}, "transfers": {"1": 102}}, 0, "10", "lacks the change of the transaction committed 1"},
		{"12 before 11", sample{"accounts": {"1": 100, "2": 101}, "transfers": {}}, 0, "10", ""},
		{"a snapshot row missing", sample{"accounts": {"1": 1}, "transfers": {}}, 0, "(snapshot)", "lacks the row's snapshot"},
		{"a row from nowhere", sample{"accounts": {"1": 1, "2": 2, "3": 7}, "transfers": {}}, 0, "(none: a row no change event made)", "no change event"},
	} {
		k, torn := h.check(c.s)
		switch {
		case c.torn == "" && torn != nil:
			t.Errorf("%s: torn %+v, want prefix %d", c.name, *torn, c.prefix)
		case c.torn == "" && k != c.prefix:
			t.Errorf("%s: prefix %d, want %d", c.name, k, c.prefix)
		case c.torn != "" && torn == nil:
			t.Errorf("%s: consistent at prefix %d, want torn at %s", c.name, k, c.torn)
		case c.torn != "" && (torn.Txn != c.torn || !strings.Contains(torn.Detail, c.detail)):
			t.Errorf("%s: torn at %s (%s), want %s (%s)", c.name, torn.Txn, torn.Detail, c.torn, c.detail)
		}
	}
}
