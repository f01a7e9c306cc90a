"""Writes records with Confluent's own serializers (confluent-kafka's
AvroSerializer, ProtobufSerializer and JSONSerializer) through a
transactional producer that aborts some of its transactions, for
integration/pyserde_test.go. Every transaction holds --txn-records records;
the share --abort-ratio of them is aborted, spread evenly over the run (the
transactions whose index i has floor((i+1)*ratio) > floor(i*ratio)), so the
aborted share is what was asked for whatever the seed.

Each committed record is written to --out as one JSON line: its partition,
offset, id and the value of each column as the test expects to read it back
(decimals as text with their scale, instants as epoch milli- or microseconds,
floats as numbers). A last line on stdout sums up the transactions and the records in each
outcome, which the test asserts.

Usage: pyserde_produce.py --bootstrap H:P --registry URL --topic T
       --format avro|protobuf|jsonschema --records N --partitions P
       --seed S --out FILE [--txn-records N] [--abort-ratio R]
"""

import argparse
import datetime
import decimal
import json
import random
import sys

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext

AVRO_V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "txsink.pyserde",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "seq", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
# Version 2 adds an optional field with a default: BACKWARD-compatible.
AVRO_V2 = dict(AVRO_V1, fields=AVRO_V1["fields"] + [{"name": "note", "type": ["null", "string"], "default": None}])

# The Protobuf schema is pyserde_event.proto beside this file, which the test
# registers; proto_event_class builds the same messages in the same order.

JSON_SCHEMA = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "txsink.pyserde.Event",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "seq": {"type": "integer"},
        "price": {"type": "number"},
        "ok": {"type": "boolean"},
        "label": {"type": "string"},
    },
    "required": ["id", "seq", "price", "ok", "label"],
})

TEXTS = ["plain", 'q"uote', "back\\slash", "héllo", "日本", "tab\tnl\n", "emoji 🎉"]

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def proto_event_class():
    """Builds the Event message class of pyserde_event.proto (no protoc
    here): Header first, so Event is the file's second message and the
    serializer writes message index [1]."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    fdp = descriptor_pb2.FileDescriptorProto(
        name="txsink_pyserde.proto", package="txsink.pyserde", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    F = descriptor_pb2.FieldDescriptorProto
    header = fdp.message_type.add(name="Header")
    header.field.add(name="source", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    ev = fdp.message_type.add(name="Event")
    ev.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    ev.field.add(name="seq", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    ev.field.add(name="score", number=3, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    ev.field.add(name="at", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                 type_name=".google.protobuf.Timestamp")
    ev.field.add(name="item", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                 type_name=".txsink.pyserde.Event.Item")
    ev.field.add(name="tags", number=6, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    item = ev.nested_type.add(name="Item")
    item.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    item.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.Default()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("txsink.pyserde.Event"))


class Writer:
    """Serializes seq's record for one format and says what its columns
    must hold."""

    def __init__(self, fmt, registry, topic):
        self.fmt = fmt
        self.topic = topic
        ctx = SerializationContext(topic, MessageField.VALUE)
        self.ctx = ctx
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer
            # Each serializer registers its schema (auto.register.schemas,
            # the default), as an application would.
            self.v1 = AvroSerializer(registry, json.dumps(AVRO_V1))
            self.v2 = AvroSerializer(registry, json.dumps(AVRO_V2))
        elif fmt == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
            self.cls = proto_event_class()
            # The test registered pyserde_event.proto (AxonOps takes .proto
            # text, not the descriptor the serializer would register).
            self.ser = ProtobufSerializer(self.cls, registry,
                                          {"auto.register.schemas": False, "use.latest.version": True})
        elif fmt == "jsonschema":
            from confluent_kafka.schema_registry.json_schema import JSONSerializer
            self.ser = JSONSerializer(JSON_SCHEMA, registry)
        else:
            raise SystemExit("unknown format " + fmt)

    def record(self, seq, rnd):
        """Returns (value bytes, expected columns) of seq's record."""
        rid = "%s-%d" % (self.fmt, seq)
        if self.fmt == "avro":
            unscaled = rnd.randint(-10**12 + 1, 10**12 - 1)
            amount = decimal.Decimal(unscaled).scaleb(-3)
            ms = rnd.randint(-2208988800000, 4102444800000)
            at = EPOCH + datetime.timedelta(milliseconds=ms)
            v = {"id": rid, "seq": seq, "amount": amount, "at": at}
            want = {"amount": format(amount, ".3f"), "at_ms": ms, "note": None}
            if seq % 3 != 0:
                note = rnd.choice(TEXTS) + str(seq)
                v["note"] = note if seq % 7 else None
                want["note"] = v["note"]
                b = self.v2(v, self.ctx)
            else:
                b = self.v1(v, self.ctx)
        elif self.fmt == "protobuf":
            m = self.cls()
            m.id, m.seq = rid, seq
            m.score = rnd.randint(-4000000, 4000000) / 4
            us = rnd.randint(-2208988800000000, 4102444800000000)
            m.at.seconds, m.at.nanos = us // 1000000, (us % 1000000) * 1000
            m.item.name = rnd.choice(TEXTS)
            m.item.qty = rnd.randint(0, 3)
            tags = [rnd.choice(["a", "b", "c"]) for _ in range(rnd.randint(1, 3))]
            m.tags.extend(tags)
            b = self.ser(m, self.ctx)
            want = {"score": m.score, "at_us": us, "item_name": m.item.name, "item_qty": m.item.qty, "tags": tags}
        else:
            v = {"id": rid, "seq": seq, "price": rnd.randint(-10**6, 10**6) / 8,
                 "ok": rnd.random() < 0.5, "label": rnd.choice(TEXTS)}
            b = self.ser(v, self.ctx)
            want = {"price": v["price"], "ok": v["ok"], "label": v["label"]}
        want["id"], want["seq"] = rid, seq
        return b, want


def new_producer(bootstrap, txid):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txid,
        "enable.idempotence": True,
        "linger.ms": 5,
    })
    # A new producer with the transactional id aborts whatever an earlier
    # one left open.
    p.init_transactions(60)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--format", required=True)
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--abort-ratio", type=float, default=0.15)
    ap.add_argument("--txn-records", type=int, default=500)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    rnd = random.Random(a.seed)
    registry = SchemaRegistryClient({"url": a.registry})
    w = Writer(a.format, registry, a.topic)
    txid = "pyserde-" + a.topic
    prod = new_producer(a.bootstrap, txid)

    pending = []
    errors = []

    def on_delivery(err, msg, want):
        if err is not None:
            errors.append(str(err))
            return
        pending.append({"p": msg.partition(), "o": msg.offset(), "want": want})

    committed = 0
    total_tx = aborted_tx = aborted_rc = fatal_aborts = 0
    seq = 0
    with open(a.out, "w", encoding="utf-8") as out:
        while committed < a.records:
            n = a.txn_records
            abort = int((total_tx + 1) * a.abort_ratio) > int(total_tx * a.abort_ratio)
            prod.begin_transaction()
            for _ in range(n):
                b, want = w.record(seq, rnd)
                prod.produce(a.topic, value=b, partition=seq % a.partitions,
                             on_delivery=lambda err, msg, want=want: on_delivery(err, msg, want))
                seq += 1
            prod.flush(60)
            if errors:
                raise SystemExit("delivery failed: %s" % errors[:3])
            total_tx += 1
            if abort:
                try:
                    prod.abort_transaction(60)
                except KafkaException as e:
                    # librdkafka 2.16 against a transaction.version=2 broker
                    # sometimes fails an abort fatally; a new producer with
                    # the same transactional id aborts it for certain.
                    if not e.args[0].fatal():
                        raise
                    fatal_aborts += 1
                    prod = new_producer(a.bootstrap, txid)
                aborted_tx += 1
                aborted_rc += len(pending)
            else:
                while True:
                    try:
                        prod.commit_transaction(60)
                        break
                    except KafkaException as e:
                        if e.args[0].retriable():
                            continue
                        raise  # not known committed: the test cannot tell, so it fails
                committed += len(pending)
                for r in pending:
                    out.write(json.dumps(r, ensure_ascii=False) + "\n")
            pending.clear()
    print(json.dumps({"committed": committed, "total_tx": total_tx, "aborted_tx": aborted_tx,
                      "aborted_records": aborted_rc, "fatal_aborts": fatal_aborts}))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        print("kafka error: %s" % e, file=sys.stderr)
        sys.exit(2)
