package transform_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// A transform's failure reaches the sink as a bad record at the record's
// coordinates, naming the field and the transform's alias.
func TestBadRecordThroughPipeline(t *testing.T) {
	v := values(oneSettings(extractValue, "field", "nope")...)
	v["value.converter"], v["value.converter.schemas.enable"] = convert.JSONClass, "true"
	p, err := convert.NewPipeline(v)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: "orders", Partition: 2, Offset: 17,
		Value: []byte(`{"schema":{"type":"struct","fields":[{"field":"a","type":"int32"}]},"payload":{"a":1}}`)}
	var sc convert.Scratch
	_, err = p.Convert(context.Background(), r, &sc, false)
	var bad *record.Error
	if !errors.As(err, &bad) || !errors.Is(err, record.ErrTransform) {
		t.Fatalf("Convert = %v, want a *record.Error wrapping ErrTransform", err)
	}
	if bad.Field != "nope" || bad.Topic != "orders" || bad.Partition != 2 || bad.Offset != 17 {
		t.Errorf("bad record %+v", bad)
	}
	contains(t, "error", err.Error(), `transform "x"`, "ExtractField$Value", `unknown field "nope"`)
}

// A chain is used by every task of a connector at once: the same records
// transform to the same results concurrently (run with -race).
func TestChainConcurrent(t *testing.T) {
	c := chainOf(t, "transforms", "unwrap,rename,ins,ts,route",
		"transforms.unwrap.type", unwrap, "transforms.unwrap.delete.tombstone.handling.mode", "rewrite", "transforms.unwrap.add.fields", "op,lsn",
		"transforms.rename.type", replaceValue, "transforms.rename.renames", "first_name:name",
		"transforms.ins.type", insertValue, "transforms.ins.topic.field", "t", "transforms.ins.offset.field", "o",
		"transforms.ts.type", tsValue, "transforms.ts.field", "o", "transforms.ts.target.type", "Timestamp",
		"transforms.route.type", "RegexRouter", "transforms.route.regex", `(.*)\.(.*)`, "transforms.route.replacement", "$2")
	inputs := []func() record.Value{
		func() record.Value { return dbzEvent(t, "c", "null", row1) },
		func() record.Value { return dbzEvent(t, "d", row1, "null") },
		func() record.Value { return dbzJSON(t, "u", row1, row1b) },
		func() record.Value { return dbzJSON(t, "d", row1b, "null") },
	}
	run := func(i int) string {
		r := rec(inputs[i%len(inputs)]())
		r.Topic = fmt.Sprintf("db.t%d", i%3)
		keep, err := c.Apply(r)
		if err != nil || !keep {
			return fmt.Sprintf("keep %v err %v", keep, err)
		}
		return r.Topic + " " + js(t, r.Value) + " " + r.Value.Schema().String()
	}
	want := make([]string, 24)
	for i := range want {
		want[i] = run(i)
	}
	if !strings.Contains(want[0], `"name":"Anne"`) || !strings.Contains(want[0], `"o":"1970-01-01T00:00:00.042Z"`) {
		t.Fatalf("sequential result %s", want[0])
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(want))
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range want {
				if got := run(i); got != want[i] {
					errs <- fmt.Sprintf("record %d: %s, sequentially %s", i, got, want[i])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
