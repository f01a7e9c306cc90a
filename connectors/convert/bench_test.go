package convert

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/connectors/record"
)

// The same rows, about 100 bytes as JSON, through each converter, then
// read field by field as a sink reads them (the JSON path's values are
// lazy, so converting alone would flatter it). Run:
//
//	go test -run '^$' -bench BenchmarkConvertRows -benchtime 2s ./connectors/convert/
//
// Each sub-benchmark reports records/s; compare avro's with json's.

const benchAvroSchema = `{"type":"record","name":"Row","fields":[
 {"name":"id","type":"long"},{"name":"user","type":"string"},{"name":"qty","type":"int"},
 {"name":"price","type":"double"},{"name":"paid","type":"boolean"},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"note","type":"string"}]}`

const benchProto = `syntax = "proto3";
import "google/protobuf/timestamp.proto";
message Row { int64 id = 1; string user = 2; int32 qty = 3; double price = 4; bool paid = 5; google.protobuf.Timestamp at = 6; string note = 7; }`

const benchJSONSchema = `{"type":"object","properties":{"id":{"type":"integer"},"user":{"type":"string"},"qty":{"type":"integer"},
 "price":{"type":"number"},"paid":{"type":"boolean"},"at":{"type":"integer","title":"org.apache.kafka.connect.data.Timestamp"},"note":{"type":"string"}}}`

func benchRow(i int) map[string]any {
	return map[string]any{"id": int64(1_000_000 + i), "user": fmt.Sprintf("user-%06d", i), "qty": int32(i % 100),
		"price": float64(i%10000) / 100, "paid": i%2 == 0, "at": time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(),
		"note": "standard delivery"}
}

// readRow reads every field as a sink fills column slots.
func readRow(v record.Value) error {
	return v.Range(func(name []byte, f record.Value) error {
		var err error
		switch string(name) {
		case "id", "qty":
			_, err = f.AsInt64()
		case "user", "note":
			_, err = f.AsString()
		case "price":
			_, err = f.AsFloat(64)
		case "paid":
			_, err = f.AsBool()
		case "at":
			_, err = f.AsTimestamp()
		}
		return err
	})
}

func BenchmarkConvertRows(b *testing.B) {
	reg := newTestRegistry(&testing.T{})
	defer reg.srv.Close()
	const n = 1024
	rows := map[string][][]byte{}
	var jsonBytes int
	for i := range n {
		r := benchRow(i)
		j := map[string]any{}
		for k, v := range r {
			j[k] = v
		}
		j["at"] = r["at"].(time.Time).UnixMilli()
		text, _ := json.Marshal(j)
		jsonBytes += len(text)
		rows["json"] = append(rows["json"], text)
	}
	aid, _ := reg.register("bench-avro", sr.Schema{Schema: benchAvroSchema})
	pid, _ := reg.register("bench-proto", sr.Schema{Schema: benchProto, Type: sr.TypeProtobuf})
	jid, _ := reg.register("bench-json", sr.Schema{Schema: benchJSONSchema, Type: sr.TypeJSON})
	for i := range n {
		rows["avro"] = append(rows["avro"], avroFrame(b, benchAvroSchema, aid, benchRow(i)))
		rows["jsonschema"] = append(rows["jsonschema"], frame(b, jid, nil, rows["json"][i]))
		r := benchRow(i)
		pj := fmt.Sprintf(`{"id":"%d","user":%q,"qty":%d,"price":%v,"paid":%v,"at":%q,"note":%q}`, r["id"], r["user"], r["qty"], r["price"], r["paid"],
			r["at"].(time.Time).Format(time.RFC3339Nano), r["note"])
		rows["protobuf"] = append(rows["protobuf"], frame(b, pid, []int{0}, protoMessage(b, benchProto, nil, []int{0}, pj)))
	}
	b.Logf("JSON rows average %d bytes", jsonBytes/n)
	convs := map[string]Converter{
		"json":       NewDefaultJSON(false),
		"avro":       newConverter(b, AvroClass, reg.settings()),
		"protobuf":   newConverter(b, ProtobufClass, reg.settings()),
		"jsonschema": newConverter(b, JSONSchemaClass, reg.settings()),
	}
	for _, name := range []string{"json", "avro", "protobuf", "jsonschema"} {
		b.Run(name, func(b *testing.B) {
			c, data := convs[name], rows[name]
			var buf Buffer
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				v, err := c.Convert(ctx, "t", nil, data[i%n], &buf)
				if err != nil {
					b.Fatal(err)
				}
				if err := readRow(v); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
