// Package convert holds txsink's converters, configured with Kafka
// Connect's class names and settings (key.converter, value.converter and
// their prefixed settings), and the [Pipeline] that runs them on every
// record before a sink sees it: Kafka Connect's split, in which a sink
// never parses a wire format.
//
// Every converter is a pure function of the record and of schemas that
// are immutable by id (a Schema Registry id never changes meaning), so a
// redo of a batch builds the same rows again (invariant 6). A failure that
// is the record's fault wraps record.ErrDecode (a bad record, invariant
// 8); a failure of the environment, such as a registry that does not
// answer, wraps record.ErrUnavailable and is never a bad record: the task
// waits and retries.
package convert

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/internal/jsonscan"
	"github.com/txsink/txsink/connectors/record"
)

// Converter turns the bytes of a record's key or value into a Value
// (Kafka Connect's Converter.toConnectData).
type Converter interface {
	// Convert decodes data, nil for a null key or value, of a record of
	// topic. A schemaless result may refer to data and to buf; it is
	// valid until buf's next use. The bytes of its strings and bytes
	// values are data's or of the converter's own allocation, never
	// memory that buf (or anything else) reuses: a sink's rows may
	// refer to them for as long as the record is held
	// (record.Value.AsTextShared, AsBytes). Bad data returns an error wrapping
	// record.ErrDecode; a failure of the environment (a registry that
	// does not answer) one wrapping record.ErrUnavailable. Cancelling ctx
	// stops a registry request in flight; the error then wraps
	// record.ErrUnavailable too.
	Convert(ctx context.Context, topic string, headers []kgo.RecordHeader, data []byte, buf *Buffer) (record.Value, error)
}

// Buffer is what a converter reuses from one record to the next on one
// goroutine; the zero value is ready.
type Buffer struct {
	members []jsonscan.Member
	object  record.ObjectBuffer
	arena   valueArena   // the fields of records decoded with a schema (Avro, Protobuf)
	proto   protoScratch // the state of the Protobuf messages being decoded
}

// Scratch holds a Pipeline's buffers for one goroutine: one for keys, one
// for values. The zero value is ready.
type Scratch struct {
	key, value Buffer
	rec        record.Record
	change     record.Change
}

// Factory builds a converter from its settings: the connector settings
// under the converter's prefix, with the prefix removed
// ("value.converter.schemas.enable" arrives as "schemas.enable"). isKey
// says whether it converts keys. A bad setting is a config.FieldError
// naming the setting under the prefix; the caller adds the prefix. rp is
// the worker's policy for Schema Registry clients (converters without a
// registry ignore it).
type Factory func(settings map[string]string, isKey bool, rp RegistryPolicy) (Converter, error)

// Plugin describes a converter class for the registry and for the
// connector-plugins listing.
type Plugin struct {
	// Class is Kafka Connect's class name.
	Class string
	// Aliases are other accepted names (the short class name).
	Aliases []string
	// Version is shown in plugin listings.
	Version string
	New     Factory
}

// classes maps class names and aliases to plugins. It is filled by the
// init functions of this package's files and read-only afterwards.
var classes = map[string]Plugin{}

func register(p Plugin) {
	for _, n := range append([]string{p.Class}, p.Aliases...) {
		if _, dup := classes[n]; dup {
			panic("convert: converter " + n + " registered twice")
		}
		classes[n] = p
	}
}

// Plugins lists the converter classes, sorted by class name.
func Plugins() []Plugin {
	seen := map[string]bool{}
	var out []Plugin
	for _, p := range classes {
		if !seen[p.Class] {
			seen[p.Class] = true
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Class < out[j].Class })
	return out
}

// Lookup finds a converter class by class name or alias.
func Lookup(class string) (Plugin, bool) {
	p, ok := classes[strings.TrimSpace(class)]
	return p, ok
}

// New builds the converter named by class with settings (the prefix
// already removed), under the default RegistryPolicy unless an option
// gives the worker's.
func New(class string, settings map[string]string, isKey bool, opts ...Option) (Converter, error) {
	p, ok := Lookup(class)
	if !ok {
		return nil, fmt.Errorf("unknown converter class %q; known: %s", class, strings.Join(classNames(), ", "))
	}
	return p.New(settings, isKey, applyOptions(opts).registry)
}

// Option changes how converters and pipelines are built.
type Option func(*options)

type options struct{ registry RegistryPolicy }

// WithRegistryPolicy makes the converters' Schema Registry clients follow
// the worker's policy (the default: RegistryPolicy's zero value).
func WithRegistryPolicy(p RegistryPolicy) Option { return func(o *options) { o.registry = p } }

func applyOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func classNames() []string {
	var out []string
	for _, p := range Plugins() {
		out = append(out, p.Class)
	}
	return out
}
