package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"testing"
)

// connectDecimal encodes n as Kafka Connect's Decimal logical type does in
// a JsonConverter payload: the unscaled value's big-endian two's
// complement bytes, base64.
func connectDecimal(n *big.Int) string {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	l := n.BitLen()/8 + 1
	m := new(big.Int).Add(n, new(big.Int).Lsh(big.NewInt(1), uint(8*l)))
	return base64.StdEncoding.EncodeToString(m.Bytes())
}

// decimalUnscaled is the test's unscaled amount of record seq: both
// signs, several digit counts.
func decimalUnscaled(seq int) *big.Int {
	v := big.NewInt(int64(seq)*int64(seq)*7919 - 40_000_000)
	if seq%5 == 0 {
		v.Neg(v)
	}
	return v
}

// TestClickHouseDecimal: Kafka Connect's Decimal logical type (scale 2)
// in a JsonConverter envelope, base64 of the unscaled value, into a
// Decimal(18, 2) column, exactly_once. Every row's amount equals its
// record's unscaled value / 100, exactly. (PostgreSQL's sink decodes this
// type; the ClickHouse sink gets it from the shared record pipeline.)
func TestClickHouseDecimal(t *testing.T) {
	const topic = "chdecimal"
	k, ch, db, conn := chFeatureEnv(t, topic)
	chExec(t, conn, "CREATE TABLE "+topic+" (id String, amount Decimal(18, 2), __connect_topic String, __connect_partition Int32, __connect_offset Int64) ENGINE = "+chEngine(ch, db, topic, 1000))
	schema := json.RawMessage(`{"type":"struct","optional":false,"fields":[` +
		`{"field":"id","type":"string","optional":false},` +
		`{"field":"amount","type":"bytes","optional":false,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"18"}}]}`)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 600, Partitions: 2, AbortRatio: 0.15, MaxTxn: 30, Seed: 305,
		Value: func(seq int, id string) []byte {
			b, _ := json.Marshal(map[string]any{"schema": schema, "payload": map[string]any{"id": id, "amount": connectDecimal(decimalUnscaled(seq))}})
			return b
		}}, &u)
	cfg := chConnector(topic, topic, ch, db, "exactly_once")
	runDrained(t, k, conn, cfg, &u)
	chExact(t, conn, &u, topic, topic)

	got := map[string]string{}
	rows, err := conn.Query(context.Background(), "SELECT id, toString(amount) FROM "+topic)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, amount string
		if err := rows.Scan(&id, &amount); err != nil {
			t.Fatal(err)
		}
		got[id] = amount
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, rs := range u.committed {
		for _, r := range rs {
			want := new(big.Rat).SetFrac(decimalUnscaled(r.Seq), big.NewInt(100))
			g, ok := new(big.Rat).SetString(got[r.ID])
			if !ok || g.Cmp(want) != 0 {
				t.Fatalf("%s: amount %q, want %s", r.ID, got[r.ID], want.FloatString(2))
			}
			n++
		}
	}
	t.Logf("%d Decimal(18, 2) amounts exact", n)
}
