package convert

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

// Setting names (Kafka Connect's).
const (
	KeyKeyConverter   = "key.converter"
	KeyValueConverter = "value.converter"
)

// Settings under a converter's prefix that this package documents (the
// Schema Registry ones apply to the Avro, Protobuf and JSON Schema
// converters).
const (
	SettingSchemasEnable        = "schemas.enable"
	SettingRegistryURL          = "schema.registry.url"
	SettingBasicAuthSource      = "basic.auth.credentials.source"
	SettingBasicAuthUserInfo    = "basic.auth.user.info"
	SettingBearerAuthSource     = "bearer.auth.credentials.source"
	SettingBearerAuthToken      = "bearer.auth.token"
	SettingTruststoreType       = "schema.registry.ssl.truststore.type"
	SettingTruststoreCerts      = "schema.registry.ssl.truststore.certificates"
	SettingKeystoreType         = "schema.registry.ssl.keystore.type"
	SettingKeystoreCertChain    = "schema.registry.ssl.keystore.certificate.chain"
	SettingKeystoreKey          = "schema.registry.ssl.keystore.key"
	SettingEndpointVerification = "schema.registry.ssl.endpoint.identification.algorithm"
	SettingJSONSchemaValidate   = "json.fail.invalid.schema"
)

// Defs are the converter settings of every connector: the two classes and
// the documented settings under each prefix.
var Defs = func() config.Defs {
	ds := config.Defs{
		{Name: KeyKeyConverter, Type: config.String, Group: "Converters", Check: checkClass,
			Doc: "Converter of record keys, by Kafka Connect class name: " + strings.Join(documentedClasses, ", ") + ". Empty: txsink's JSON converter, which reads schemaless JSON and Connect's JSON envelope alike, and reads a key that is not JSON as a string."},
		{Name: KeyValueConverter, Type: config.String, Group: "Converters", Check: checkClass,
			Doc: "Converter of record values (as key.converter). Empty: txsink's JSON converter, which reads schemaless JSON and Connect's JSON envelope ({\"schema\": …, \"payload\": …}) alike."},
	}
	for _, p := range []string{KeyKeyConverter, KeyValueConverter} {
		ds = append(ds,
			config.Def{Name: p + "." + SettingSchemasEnable, Type: config.Boolean, Group: "Converters", Doc: "JsonConverter: true (Connect's default when the class is set) requires the envelope {\"schema\": …, \"payload\": …}; false reads plain JSON."},
			config.Def{Name: p + "." + SettingRegistryURL, Type: config.List, Group: "Converters", Doc: "Schema Registry URLs (comma-separated; tried in turn) for the Avro, Protobuf and JSON Schema converters."},
			config.Def{Name: p + "." + SettingBasicAuthSource, Type: config.String, Group: "Converters", Enum: []string{"USER_INFO", "URL"}, Doc: "Registry basic authentication: USER_INFO takes basic.auth.user.info; URL takes the user information of the registry URL."},
			config.Def{Name: p + "." + SettingBasicAuthUserInfo, Type: config.Password, Group: "Converters", Doc: "Registry credentials as user:password (basic.auth.credentials.source=USER_INFO)."},
			config.Def{Name: p + "." + SettingBearerAuthSource, Type: config.String, Group: "Converters", Enum: []string{"STATIC_TOKEN"}, Doc: "Registry bearer authentication: STATIC_TOKEN sends bearer.auth.token."},
			config.Def{Name: p + "." + SettingBearerAuthToken, Type: config.Password, Group: "Converters", Doc: "Registry bearer token (bearer.auth.credentials.source=STATIC_TOKEN)."},
			config.Def{Name: p + "." + SettingTruststoreType, Type: config.String, Group: "Converters", Enum: []string{"PEM"}, Doc: "Registry TLS trust store type: PEM, given inline in schema.registry.ssl.truststore.certificates (files are not read: a REST client must not make the worker read its files)."},
			config.Def{Name: p + "." + SettingTruststoreCerts, Type: config.String, Group: "Converters", Doc: "PEM certificates the registry's TLS certificate must chain to (default: the system's roots)."},
			config.Def{Name: p + "." + SettingKeystoreType, Type: config.String, Group: "Converters", Enum: []string{"PEM"}, Doc: "Registry TLS client certificate type: PEM, given inline in the two settings below."},
			config.Def{Name: p + "." + SettingKeystoreCertChain, Type: config.String, Group: "Converters", Doc: "PEM client certificate chain for mutual TLS with the registry."},
			config.Def{Name: p + "." + SettingKeystoreKey, Type: config.Password, Group: "Converters", Doc: "PEM private key of the client certificate."},
			config.Def{Name: p + "." + SettingJSONSchemaValidate, Type: config.Boolean, Group: "Converters", Doc: "JsonSchemaConverter: true validates every payload against its JSON Schema; a payload that fails is a bad record naming the failing location."},
		)
	}
	return ds
}()

// documentedClasses are the classes the setting docs list.
var documentedClasses = []string{JSONClass, StringClass, ByteArrayClass,
	"io.confluent.connect.avro.AvroConverter", "io.confluent.connect.protobuf.ProtobufConverter", "io.confluent.connect.json.JsonSchemaConverter"}

func checkClass(v string) error {
	if _, ok := Lookup(v); !ok {
		return fmt.Errorf("unknown converter class %q; known: %s", v, strings.Join(classNames(), ", "))
	}
	return nil
}

// Pipeline converts Kafka records into typed records for a sink: the key
// and value converters of one connector. It is safe for concurrent use;
// each goroutine brings its own Scratch.
type Pipeline struct {
	key, value Converter
	chain      *transform.Chain
	cdc        *cdcStage
}

// NewPipeline builds the pipeline of a connector from its validated
// settings. Its errors are config.FieldErrors naming the offending
// setting.
func NewPipeline(v config.Values, opts ...Option) (*Pipeline, error) {
	p := &Pipeline{}
	var err error
	if p.key, err = converterFor(v, KeyKeyConverter, true, opts); err != nil {
		return nil, err
	}
	if p.value, err = converterFor(v, KeyValueConverter, false, opts); err != nil {
		return nil, err
	}
	if p.chain, err = transform.NewChain(v); err != nil {
		return nil, err
	}
	p.cdc = newCDCStage(v)
	return p, nil
}

// Check returns every problem of the converter and transform settings of
// v, where NewPipeline stops at the first: the key converter's, the value
// converter's and the transforms'. An error that names no setting is
// reported on the stage's own setting.
func Check(v config.Values, opts ...Option) config.Errors {
	var errs config.Errors
	add := func(err error, setting string) {
		if err == nil {
			return
		}
		var fe config.FieldError
		if !errors.As(err, &fe) {
			fe = config.FieldError{Name: setting, Msg: err.Error()}
		}
		errs = append(errs, fe)
	}
	_, err := converterFor(v, KeyKeyConverter, true, opts)
	add(err, KeyKeyConverter)
	_, err = converterFor(v, KeyValueConverter, false, opts)
	add(err, KeyValueConverter)
	_, err = transform.NewChain(v)
	add(err, "transforms")
	return errs
}

// DefaultPipeline is the pipeline of a connector with no converter
// settings: txsink's JSON converter for keys and values, and change events
// recognised (cdc.format=auto).
func DefaultPipeline() *Pipeline {
	return &Pipeline{key: NewDefaultJSON(true), value: NewDefaultJSON(false), cdc: newCDCStage(nil)}
}

func converterFor(v config.Values, prefix string, isKey bool, opts []Option) (Converter, error) {
	class := strings.TrimSpace(v[prefix])
	if class == "" {
		return NewDefaultJSON(isKey), nil
	}
	settings := map[string]string{}
	for k, val := range v {
		if rest, ok := strings.CutPrefix(k, prefix+"."); ok {
			settings[rest] = val
		}
	}
	c, err := New(class, settings, isKey, opts...)
	if err != nil {
		var fe config.FieldError
		if errors.As(err, &fe) {
			return nil, config.FieldError{Name: prefix + "." + fe.Name, Msg: fe.Msg}
		}
		return nil, config.FieldError{Name: prefix, Msg: err.Error()}
	}
	return c, nil
}

// Convert converts r's value, and its key when withKey is set or a
// transform or a change event needs it, runs the connector's transforms,
// and then recognises change events (cdc.format): a Debezium envelope
// becomes a record whose Op, Value (the row after the change), OldKey and
// Change say what to apply by its key. The result is held in sc. A nil
// Record and a nil error mean r is dropped (a transform filtered it, or it
// is a change event with nothing to apply): the sink writes nothing for
// it. Bad data returns a *record.Error naming r's coordinates; a failure
// of the environment returns an error wrapping record.ErrUnavailable
// (retry later, never skip). The result may refer to r's bytes and is
// valid until sc's next use.
func (p *Pipeline) Convert(ctx context.Context, r *kgo.Record, sc *Scratch, withKey bool) (*record.Record, error) {
	out := &sc.rec
	*out = record.Record{Topic: r.Topic, Timestamp: r.Timestamp, Headers: r.Headers, Raw: r}
	var err error
	if out.Value, err = p.value.Convert(ctx, r.Topic, r.Headers, r.Value, &sc.value); err != nil {
		return nil, p.fail(r, err, "")
	}
	keyDone := false
	if withKey || p.chain.NeedsKey() {
		if out.Key, err = p.key.Convert(ctx, r.Topic, r.Headers, r.Key, &sc.key); err != nil {
			return nil, p.fail(r, err, "key: ")
		}
		keyDone = true
	}
	if p.chain != nil {
		keep, err := p.chain.Apply(out)
		if err != nil {
			return nil, p.fail(r, err, "")
		}
		if !keep {
			return nil, nil
		}
	}
	keyErr := error(nil)
	key := func() error {
		if keyDone {
			return nil
		}
		keyDone = true
		out.Key, keyErr = p.key.Convert(ctx, r.Topic, r.Headers, r.Key, &sc.key)
		return keyErr
	}
	keep, err := p.cdc.apply(out, &sc.change, key)
	if err != nil {
		if keyErr != nil {
			return nil, p.fail(r, err, "key: ")
		}
		return nil, p.fail(r, err, "")
	}
	if !keep {
		return nil, nil
	}
	return out, nil
}

func (p *Pipeline) fail(r *kgo.Record, err error, what string) error {
	if errors.Is(err, record.ErrUnavailable) || !(errors.Is(err, record.ErrDecode) || errors.Is(err, record.ErrTransform) || errors.Is(err, record.ErrTruncate)) {
		return err
	}
	if what != "" {
		err = prefixed{what, err}
	}
	return record.NewError(r, err)
}

// prefixed puts a word before an error's text, keeping its chain.
type prefixed struct {
	p   string
	err error
}

func (e prefixed) Error() string { return e.p + e.err.Error() }
func (e prefixed) Unwrap() error { return e.err }

// RegistryTargets names where a connector's converters send registry
// credentials: the scheme, host and port of every key.converter and
// value.converter schema.registry.url, without user information, in a
// canonical text ("" when there is none), with how the registry's TLS
// certificate is checked: the trusted certificates (by digest) and the
// host name check, when set. The worker binds stored converter secrets to
// it, as it binds a sink's password to its hosts: a change of the registry,
// or of how it is authenticated, that does not send the secret again drops
// it.
func RegistryTargets(v map[string]string) string {
	var parts []string
	for _, p := range []string{KeyKeyConverter, KeyValueConverter} {
		var hosts []string
		for _, raw := range strings.Split(v[p+"."+SettingRegistryURL], ",") {
			raw = strings.TrimSpace(raw)
			if raw == "" {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" {
				hosts = append(hosts, "invalid")
				continue
			}
			hosts = append(hosts, strings.ToLower(u.Scheme)+"://"+strings.ToLower(u.Host))
		}
		if len(hosts) > 0 {
			parts = append(parts, p+"="+strings.Join(hosts, ",")+registryTLSIdentity(v, p+"."))
		}
	}
	return strings.Join(parts, " ")
}

// registryTLSIdentity is the part of a converter's registry target that
// says how the registry is authenticated: a digest of the trusted
// certificates when set, and a host name check that is off.
func registryTLSIdentity(v map[string]string, prefix string) string {
	s := ""
	if trust := strings.TrimSpace(v[prefix+SettingTruststoreCerts]); trust != "" {
		sum := sha256.Sum256([]byte(trust))
		s += " trust=sha256:" + hex.EncodeToString(sum[:8])
	}
	if check, ok := v[prefix+SettingEndpointVerification]; ok && strings.TrimSpace(check) == "" {
		s += " hostcheck=none" // Kafka's convention: empty turns the host name check off
	}
	return s
}
