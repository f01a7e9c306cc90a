package record

import "strings"

// TxnKind says what a record is to a source transaction, as Debezium's
// transaction metadata (provide.transaction.metadata=true) describes it.
type TxnKind uint8

// Kinds of TxnMark.
const (
	// TxnNone: the record carries no transaction metadata (a snapshot
	// row, a tombstone, a record that is not a change event).
	TxnNone TxnKind = iota
	// TxnEvent: a change event of transaction ID (its transaction.id).
	TxnEvent
	// TxnBegin and TxnEnd: a record of the transaction topic (status
	// BEGIN or END); an END carries the transaction's event count.
	TxnBegin
	TxnEnd
)

// TxnID is the identity of a source transaction's id as its change
// events and its BEGIN and END name it. Debezium's PostgreSQL connector
// writes ids as txId:LSN, and the LSN part of one transaction's id is not
// the same in its change events and in its END (it is the position when
// each was written); the transaction is its txId, unique among the
// transactions a task holds (PostgreSQL reuses one only after 2^31
// others). Other ids are kept whole.
func TxnID(id string) string {
	x, lsn, ok := strings.Cut(id, ":")
	if !ok || !digits(x) || !digits(lsn) {
		return id
	}
	return x
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// TxnMark is what one record tells about the source transaction it
// belongs to.
type TxnMark struct {
	Kind TxnKind
	// ID identifies the source transaction (TxnID of its id).
	ID string
	// Count is an END's event_count: the change events of the
	// transaction, over every table.
	Count int64
}
