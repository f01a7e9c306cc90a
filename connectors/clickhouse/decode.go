package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/txsink/txsink/connectors/internal/jsonscan"
)

// document is a decoded key or value: schemaless JSON, or Kafka Connect's
// JsonConverter envelope {"schema": …, "payload": …}, whose payload is used
// (logical types are taken as their JSON payload: Timestamp as epoch
// milliseconds and Date as days, both accepted by the conversions).
type document struct {
	Null   bool                       // a tombstone
	Fields map[string]json.RawMessage // an object's fields; nil otherwise
	Scalar json.RawMessage            // a non-object document (a primitive key)
}

// objectFields decodes the JSON object b into *fields and reports whether b
// was one: with the scanner, or with encoding/json for what the scanner
// leaves to it (escaped keys, deep nesting), which validates the whole
// text so objects skip a separate pass.
func objectFields(b []byte, fields *map[string]json.RawMessage) bool {
	if f, ok := jsonscan.Fields(b); ok {
		*fields = f
		return true
	}
	return json.Unmarshal(b, fields) == nil
}

func decodeDocument(b []byte, lenientString bool) (document, error) {
	if b == nil {
		return document{Null: true}, nil
	}
	if !utf8.Valid(b) {
		return document{}, fmt.Errorf("%w: not valid UTF-8", ErrDecode)
	}
	trimmed := bytes.TrimSpace(b)
	var fields map[string]json.RawMessage
	if len(trimmed) == 0 || trimmed[0] != '{' || !objectFields(trimmed, &fields) {
		if !json.Valid(trimmed) {
			if lenientString {
				s, _ := json.Marshal(string(b))
				return document{Scalar: s}, nil
			}
			return document{}, fmt.Errorf("%w: invalid JSON", ErrDecode)
		}
		if string(trimmed) == "null" {
			return document{Null: true}, nil
		}
		return document{Scalar: json.RawMessage(trimmed)}, nil
	}
	if payload, ok := envelopePayload(fields); ok {
		return decodeDocument(payload, lenientString)
	}
	return document{Fields: fields}, nil
}

// envelopePayload recognises a JsonConverter envelope: exactly the keys
// "schema" and "payload", the schema null or an object with a "type".
func envelopePayload(fields map[string]json.RawMessage) (json.RawMessage, bool) {
	if len(fields) != 2 {
		return nil, false
	}
	sch, ok1 := fields["schema"]
	payload, ok2 := fields["payload"]
	if !ok1 || !ok2 {
		return nil, false
	}
	if string(sch) != "null" {
		var probe struct {
			Type *string `json:"type"`
		}
		if len(sch) == 0 || sch[0] != '{' || json.Unmarshal(sch, &probe) != nil || probe.Type == nil {
			return nil, false
		}
	}
	if payload == nil {
		payload = json.RawMessage("null")
	}
	return payload, true
}

func decodeValue(b []byte) (document, error) {
	d, err := decodeDocument(b, false)
	if err != nil {
		return d, err
	}
	if !d.Null && d.Fields == nil {
		return document{}, fmt.Errorf("%w: value must be a JSON object, got %s", ErrDecode, jsonKind(d.Scalar))
	}
	return d, nil
}
