package main

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The rows of the main workload (id, seq, body) in the Schema Registry
// formats, encoded by the formats' libraries and framed with franz-go's
// Confluent header.
const (
	benchAvroSchema = `{"type":"record","name":"Row","namespace":"txsink.bench","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},{"name":"body","type":"string"}]}`
	benchProtoSchema = `syntax = "proto3";
package txsink.bench;
message Row { string id = 1; int64 seq = 2; string body = 3; }
`
)

// formatConverters are the value.converter classes of the formats the
// bench can measure beside the JSON path.
var formatConverters = map[string]string{
	"avro":     "io.confluent.connect.avro.AvroConverter",
	"protobuf": "io.confluent.connect.protobuf.ProtobufConverter",
}

// formatEncoder registers format's schema with reg and returns the
// encoder of a row's value.
func formatEncoder(ctx context.Context, reg *sr.Client, subject, format string) (func(row) []byte, error) {
	var h sr.ConfluentHeader
	switch format {
	case "avro":
		s, err := avro.Parse(benchAvroSchema)
		if err != nil {
			return nil, err
		}
		ss, err := reg.CreateSchema(ctx, subject, sr.Schema{Schema: benchAvroSchema, Type: sr.TypeAvro})
		if err != nil {
			return nil, err
		}
		return func(r row) []byte {
			b, _ := h.AppendEncode(nil, ss.ID, nil)
			b, err := s.AppendEncode(b, map[string]any{"id": r.ID, "seq": r.Seq, "body": r.Body})
			if err != nil {
				panic(err) // the schema and rows are fixed: a programming error
			}
			return b
		}, nil
	case "protobuf":
		comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"row.proto": benchProtoSchema})}}
		files, err := comp.Compile(ctx, "row.proto")
		if err != nil {
			return nil, err
		}
		md := files[0].Messages().Get(0)
		ss, err := reg.CreateSchema(ctx, subject, sr.Schema{Schema: benchProtoSchema, Type: sr.TypeProtobuf})
		if err != nil {
			return nil, err
		}
		fields := md.Fields()
		id, seq, body := fields.ByName("id"), fields.ByName("seq"), fields.ByName("body")
		return func(r row) []byte {
			m := dynamicpb.NewMessage(md)
			m.Set(id, protoreflect.ValueOfString(r.ID))
			m.Set(seq, protoreflect.ValueOfInt64(r.Seq))
			m.Set(body, protoreflect.ValueOfString(r.Body))
			b, _ := h.AppendEncode(nil, ss.ID, []int{0})
			b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
			if err != nil {
				panic(err)
			}
			return b
		}, nil
	}
	return nil, fmt.Errorf("-formats: unknown format %q (want avro or protobuf)", format)
}

// formats measures txsink exactly_once on the main workload's rows in
// each of the -formats, read through their Schema Registry converters
// (franz-go's srfake served on 127.0.0.1), beside the same rows as JSON,
// runs interleaved so that the machine's drift hits every format alike.
func (b *bench) formats(ctx context.Context) error {
	w0 := b.mainWorkload
	if len(b.o.Formats) == 0 || w0 == nil {
		return nil
	}
	srv := httptest.NewServer(srfake.NewRegistry().Handler())
	b.tb.Cleanup(srv.Close)
	reg, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		return err
	}
	type fw struct {
		name  string
		w     *workload
		extra map[string]string
	}
	json := *w0
	json.Name = w0.Name + " json"
	list := []fw{{"json", &json, nil}}
	for _, f := range b.o.Formats {
		enc, err := formatEncoder(ctx, reg, b.name("fmt_"+f)+"-value", f)
		if err != nil {
			return err
		}
		w := *w0
		w.Name = w0.Name + " " + f
		w.Topic = b.name("fmt_" + f)
		if err := createTopic(ctx, b.bootstrap, w.Topic, w.Partitions); err != nil {
			return err
		}
		if w.Ends, err = preloadValues(ctx, b.bootstrap, w.Topic, w.Records, w.ValueBytes, w.Partitions, enc); err != nil {
			return err
		}
		b.logf("pre-loaded %s: the main workload's %d rows as %s", w.Topic, w.Records, f)
		list = append(list, fw{f, &w, map[string]string{
			"value.converter":                     formatConverters[f],
			"value.converter.schema.registry.url": srv.URL,
		}})
	}
	rows := make([]*Row, len(list))
	rounds := make([][]roundLine, len(list))
	for i, f := range list {
		rows[i] = &Row{System: "txsink", Mode: "exactly_once", Workload: f.w.Name, ValueBytes: f.w.ValueBytes, Partitions: f.w.Partitions, Records: f.w.Records}
	}
	for run := 0; run < b.o.Runs; run++ {
		for i, f := range list {
			res, rl, err := b.runTxsink(ctx, f.w, "exactly_once", f.extra)
			if err != nil {
				return fmt.Errorf("format %s: %w", f.name, err)
			}
			rows[i].Runs = append(rows[i].Runs, res)
			rounds[i] = append(rounds[i], rl...)
			b.logf("%s run %d: txsink exactly_once %.0f rec/s, %.1f CPU s", f.w.Name, run+1, res.RPS, res.CPUSeconds)
		}
	}
	for i, r := range rows {
		r.finish()
		r.Phases, r.Rounds = phases(rounds[i]), len(rounds[i])
		if i > 0 && rows[0].MedianRPS > 0 {
			r.Note = fmt.Sprintf("%.0f %% of the JSON row's records/s; %.2f× its CPU per record", 100*r.MedianRPS/rows[0].MedianRPS, r.CPUSecPerM/rows[0].CPUSecPerM)
		}
		b.rep.Rows = append(b.rep.Rows, r)
	}
	avro := Target{Name: "Avro vs JSON records/s (same rows, exactly_once)", Want: "≥ 90 %"}
	pb := Target{Name: "Protobuf vs JSON CPU per record (same rows, exactly_once)", Want: "≤ 1.3×"}
	for i, f := range list {
		switch {
		case f.name == "avro" && rows[0].MedianRPS > 0:
			avro.Value = rows[i].MedianRPS / rows[0].MedianRPS
			avro.Got = fmt.Sprintf("%.0f %% (%s vs %s rec/s)", avro.Value*100, fmtNum(rows[i].MedianRPS), fmtNum(rows[0].MedianRPS))
			ok := avro.Value >= 0.9
			avro.Met = &ok
		case f.name == "protobuf" && rows[0].CPUSecPerM > 0:
			pb.Value = rows[i].CPUSecPerM / rows[0].CPUSecPerM
			pb.Got = fmt.Sprintf("%.2f× (%.2f vs %.2f CPU s per million records)", pb.Value, rows[i].CPUSecPerM, rows[0].CPUSecPerM)
			ok := pb.Value <= 1.3
			pb.Met = &ok
		}
	}
	b.formatTargets = []Target{avro, pb}
	return nil
}
