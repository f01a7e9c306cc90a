package convert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/twmb/franz-go/pkg/sr"
	"golang.org/x/sync/singleflight"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/record"
)

// Settings of Confluent's converters that txsink refuses, because they
// would make the worker read its own files on behalf of a connector
// configuration (which arrives over the REST API).
const (
	settingTruststoreLocation = "schema.registry.ssl.truststore.location"
	settingKeystoreLocation   = "schema.registry.ssl.keystore.location"
)

// maxReferenceDepth bounds how deep schema references nest.
const maxReferenceDepth = 32

// registry is a Schema Registry client for the converters: several URLs
// tried in turn, credentials and TLS as configured, and schemas fetched by
// id through a process-wide cache (a schema id never changes meaning).
type registry struct {
	// key identifies the registry (its URL set, without credentials) in
	// the process-wide caches.
	key     string
	urls    []string // without user information
	clients []*sr.Client
}

// newRegistry builds a registry client from a converter's settings (the
// converter prefix removed), within the worker's policy. Errors are
// config.FieldErrors naming the setting; they never quote a credential.
func newRegistry(settings map[string]string, policy RegistryPolicy) (*registry, error) {
	get := func(k string) string { return strings.TrimSpace(settings[k]) }
	for _, k := range []string{settingTruststoreLocation, settingKeystoreLocation} {
		if get(k) != "" {
			return nil, config.FieldError{Name: k, Msg: "files are not read (a connector configuration must not make the worker read its files); give the PEM inline in " + SettingTruststoreCerts + " or " + SettingKeystoreCertChain + " and " + SettingKeystoreKey}
		}
	}
	r := &registry{}
	var urlUser *url.Userinfo
	for _, raw := range strings.Split(settings[SettingRegistryURL], ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, config.FieldError{Name: SettingRegistryURL, Msg: "not an http or https URL: " + redactURL(raw)}
		}
		if err := policy.checkURL(u); err != nil {
			return nil, config.FieldError{Name: SettingRegistryURL, Msg: err.Error()}
		}
		if u.User != nil && urlUser == nil {
			urlUser = u.User
		}
		u.User = nil
		r.urls = append(r.urls, strings.TrimSuffix(u.String(), "/"))
	}
	if len(r.urls) == 0 {
		return nil, config.FieldError{Name: SettingRegistryURL, Msg: "required by this converter: the Schema Registry URLs, comma-separated"}
	}
	sorted := append([]string(nil), r.urls...)
	sort.Strings(sorted)
	r.key = strings.Join(sorted, ",")

	opts := []sr.ClientOpt{sr.UserAgent("txsink")}
	basicSource := strings.ToUpper(get(SettingBasicAuthSource))
	userInfo := settings[SettingBasicAuthUserInfo]
	switch basicSource {
	case "":
		if userInfo != "" {
			return nil, config.FieldError{Name: SettingBasicAuthUserInfo, Msg: "is set but " + SettingBasicAuthSource + " is not USER_INFO (Confluent's default, URL, ignores it): set " + SettingBasicAuthSource + "=USER_INFO"}
		}
	case "URL":
		if urlUser == nil {
			return nil, config.FieldError{Name: SettingBasicAuthSource, Msg: "URL takes the credentials from the registry URL (https://user:password@host), but " + SettingRegistryURL + " has none"}
		}
		pass, _ := urlUser.Password()
		opts = append(opts, sr.BasicAuth(urlUser.Username(), pass))
	case "USER_INFO":
		user, pass, ok := strings.Cut(userInfo, ":")
		if !ok {
			return nil, config.FieldError{Name: SettingBasicAuthUserInfo, Msg: "must be user:password (the value is not shown)"}
		}
		opts = append(opts, sr.BasicAuth(user, pass))
	default:
		return nil, config.FieldError{Name: SettingBasicAuthSource, Msg: fmt.Sprintf("unsupported value %q: must be USER_INFO or URL", basicSource)}
	}
	switch bearer := strings.ToUpper(get(SettingBearerAuthSource)); bearer {
	case "":
	case "STATIC_TOKEN":
		token := strings.TrimSpace(settings[SettingBearerAuthToken])
		if token == "" {
			return nil, config.FieldError{Name: SettingBearerAuthToken, Msg: "required when " + SettingBearerAuthSource + "=STATIC_TOKEN"}
		}
		if basicSource != "" {
			return nil, config.FieldError{Name: SettingBearerAuthSource, Msg: "cannot be combined with " + SettingBasicAuthSource + ": choose basic or bearer authentication"}
		}
		opts = append(opts, sr.BearerToken(token))
	default:
		return nil, config.FieldError{Name: SettingBearerAuthSource, Msg: fmt.Sprintf("unsupported value %q: must be STATIC_TOKEN", bearer)}
	}

	tlsCfg, err := registryTLS(settings)
	if err != nil {
		return nil, err
	}
	opts = append(opts, sr.HTTPClient(policy.httpClient(tlsCfg)))
	for _, u := range r.urls {
		cl, err := sr.NewClient(append(opts, sr.URLs(u))...)
		if err != nil {
			return nil, config.FieldError{Name: SettingRegistryURL, Msg: err.Error()}
		}
		r.clients = append(r.clients, cl)
	}
	return r, nil
}

// registryTLS builds the TLS configuration of the registry client from
// inline PEM settings; nil when none is set (the system's roots).
func registryTLS(settings map[string]string) (*tls.Config, error) {
	get := func(k string) string { return strings.TrimSpace(settings[k]) }
	for _, k := range []string{SettingTruststoreType, SettingKeystoreType} {
		if t := strings.ToUpper(get(k)); t != "" && t != "PEM" {
			return nil, config.FieldError{Name: k, Msg: fmt.Sprintf("unsupported type %q: only PEM, given inline, is supported", t)}
		}
	}
	verifyHost, setVerify := settings[SettingEndpointVerification]
	verifyHost = strings.ToLower(strings.TrimSpace(verifyHost))
	if setVerify && verifyHost != "" && verifyHost != "https" {
		return nil, config.FieldError{Name: SettingEndpointVerification, Msg: fmt.Sprintf("unsupported value %q: must be https or empty (no host name check)", verifyHost)}
	}
	trust, chain, key := get(SettingTruststoreCerts), get(SettingKeystoreCertChain), settings[SettingKeystoreKey]
	if trust == "" && chain == "" && key == "" && !setVerify {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if trust != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(trust)) {
			return nil, config.FieldError{Name: SettingTruststoreCerts, Msg: "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	switch {
	case chain != "" && strings.TrimSpace(key) != "":
		cert, err := tls.X509KeyPair([]byte(chain), []byte(key))
		if err != nil {
			// The error text of X509KeyPair never includes key material.
			return nil, config.FieldError{Name: SettingKeystoreCertChain, Msg: "the certificate chain and key do not form a key pair: " + err.Error()}
		}
		cfg.Certificates = []tls.Certificate{cert}
	case chain != "":
		return nil, config.FieldError{Name: SettingKeystoreKey, Msg: "required with " + SettingKeystoreCertChain}
	case strings.TrimSpace(key) != "":
		return nil, config.FieldError{Name: SettingKeystoreCertChain, Msg: "required with " + SettingKeystoreKey}
	}
	if setVerify && verifyHost == "" {
		// Kafka's convention: an empty algorithm checks the chain but
		// not the host name.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the registry sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}

// redactURL removes the user information from a URL for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			return "…@" + raw[i+1:]
		}
		return raw
	}
	if u.User != nil {
		u.User = url.User("…")
	}
	return u.String()
}

// regSchema is a schema fetched by id, with every schema it references,
// directly or not.
type regSchema struct {
	ID   int
	Type sr.SchemaType
	Text string
	// Refs are the referenced schemas, each name once, every schema after
	// the schemas it references.
	Refs []regRef
}

// regRef is a referenced schema under the name the referencing schema
// uses for it (a Protobuf import path, an Avro full name, a JSON Schema
// URL).
type regRef struct {
	Name string
	Type sr.SchemaType
	Text string
}

// errUnknownSchema marks a registry answer "no such schema": a bad record.
var errUnknownSchema = errors.New("not found")

// schemaByID returns schema id with its references resolved, fetched once
// per process and registry.
func (r *registry) schemaByID(ctx context.Context, id uint32) (*regSchema, error) {
	return cached(ctx, "id\x00"+r.key+"\x00"+strconv.FormatUint(uint64(id), 10), func(ctx context.Context) (*regSchema, error) {
		var s sr.Schema
		err := r.do(ctx, fmt.Sprintf("GET /schemas/ids/%d", id), func(cl *sr.Client) error {
			var err error
			s, err = cl.SchemaByID(ctx, int(id))
			return err
		})
		if errors.Is(err, errUnknownSchema) {
			return nil, r.unknownID(ctx, id, err)
		}
		if err != nil {
			return nil, err
		}
		served.Store(r.key, id)
		out := &regSchema{ID: int(id), Type: s.Type, Text: s.Schema}
		if err := r.resolveRefs(ctx, s.References, map[string]bool{}, &out.Refs, 0); err != nil {
			return nil, err
		}
		return out, nil
	})
}

// served holds, per registry (its key), a schema id this process fetched
// from it: the witness unknownID asks about.
var served sync.Map // string → uint32

// unknownID is the error for schema id, which the registry answered it
// does not have (notFound). That is a bad record (its bytes name a schema
// no registry has) unless the registry lost its schemas: it no longer has
// an id it served this process before, or it has no subject at all, as an
// in-memory registry restarted empty. Then the record is not at fault, and
// the error wraps record.ErrUnavailable: the task waits, writing and
// skipping nothing, until the registry has the schema again (with its id;
// docs/formats.md, "Registry restarted empty").
func (r *registry) unknownID(ctx context.Context, id uint32, notFound error) error {
	bad := record.Errorf(record.ErrDecode, "unknown schema id %d (%v)", id, notFound)
	if v, ok := served.Load(r.key); ok {
		known := v.(uint32)
		err := r.do(ctx, fmt.Sprintf("GET /schemas/ids/%d", known), func(cl *sr.Client) error {
			_, err := cl.SchemaByID(ctx, int(known))
			return err
		})
		switch {
		case errors.Is(err, errUnknownSchema):
			return record.Errorf(record.ErrUnavailable, "schema id %d: the schema registry lost its schemas (it no longer has schema id %d, which it served before; restarted empty?): waiting until it has them again with their ids (%v)", id, known, notFound)
		case err != nil:
			return err // unavailable: waiting anyway
		}
		return bad
	}
	var subjects []string
	err := r.do(ctx, "GET /subjects", func(cl *sr.Client) error {
		var err error
		subjects, err = cl.Subjects(ctx)
		return err
	})
	switch {
	case err != nil && !errors.Is(err, errUnknownSchema):
		return err
	case err == nil && len(subjects) == 0:
		return record.Errorf(record.ErrUnavailable, "schema id %d: the schema registry has no schema at all (restarted empty?): waiting until it has them again with their ids (%v)", id, notFound)
	}
	return bad
}

// resolveRefs appends the schemas refs name, and the schemas they name in
// turn, to out, dependencies first, each name once.
func (r *registry) resolveRefs(ctx context.Context, refs []sr.SchemaReference, seen map[string]bool, out *[]regRef, depth int) error {
	if depth > maxReferenceDepth {
		return record.Errorf(record.ErrDecode, "schema references nest deeper than %d levels", maxReferenceDepth)
	}
	for _, ref := range refs {
		if seen[ref.Name] {
			continue
		}
		seen[ref.Name] = true
		ss, err := r.subjectVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return err
		}
		if err := r.resolveRefs(ctx, ss.References, seen, out, depth+1); err != nil {
			return err
		}
		*out = append(*out, regRef{Name: ref.Name, Type: ss.Type, Text: ss.Schema.Schema})
	}
	return nil
}

// subjectVersion returns a referenced schema, cached per process.
func (r *registry) subjectVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	return cached(ctx, "ref\x00"+r.key+"\x00"+subject+"\x00"+strconv.Itoa(version), func(ctx context.Context) (sr.SubjectSchema, error) {
		var ss sr.SubjectSchema
		err := r.do(ctx, fmt.Sprintf("GET /subjects/%s/versions/%d", url.PathEscape(subject), version), func(cl *sr.Client) error {
			var err error
			ss, err = cl.SchemaByVersion(ctx, subject, version)
			return err
		})
		if errors.Is(err, errUnknownSchema) {
			return ss, record.Errorf(record.ErrDecode, "referenced schema %q version %d (%v)", subject, version, err)
		}
		return ss, err
	})
}

// do runs one request against each registry URL in turn until one
// answers. A "not found" answer wraps errUnknownSchema; when no URL
// answers, the error wraps record.ErrUnavailable (and ErrRegistryRefused
// when the worker's policy refused a URL's request or answer) and says,
// for each URL, why (never with credentials nor an answer's text).
func (r *registry) do(ctx context.Context, what string, req func(*sr.Client) error) error {
	var why []string
	refused := false
	for i, cl := range r.clients {
		err := req(cl)
		if err == nil {
			return nil
		}
		refused = refused || errors.Is(err, ErrRegistryRefused)
		reason, notFound := classifyRegistryError(err)
		if notFound {
			return fmt.Errorf("%w: schema registry %s answered %s", errUnknownSchema, r.urls[i], reason)
		}
		why = append(why, r.urls[i]+": "+reason)
		if ctx.Err() != nil {
			break
		}
	}
	err := record.Errorf(record.ErrUnavailable, "schema registry unavailable (%s): %s", what, strings.Join(why, "; "))
	if refused {
		return refusedError{err}
	}
	return err
}

// refusedError is an unavailable registry of which at least one URL was
// refused by the worker's policy: it wraps ErrRegistryRefused too.
type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, ErrRegistryRefused} }

// classifyRegistryError says why a request failed, and whether the
// registry answered that the schema does not exist (HTTP 404 with one of
// its 404xx error codes; a 404 without one is a wrong URL, not a missing
// schema). Of an answer it shows only the registry's error JSON
// (error_code and message), never other text of the body: the URL may
// name a server that is no registry, and its answers must not reach the
// status.
func classifyRegistryError(err error) (reason string, notFound bool) {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		msg := registryMessage(re)
		switch {
		case re.StatusCode == http.StatusNotFound && re.ErrorCode >= 40400 && re.ErrorCode < 40500:
			return fmt.Sprintf("%d (error code %d: %s)", re.StatusCode, re.ErrorCode, msg), true
		case re.StatusCode == http.StatusUnauthorized:
			return "HTTP 401: the registry rejected the credentials (check basic.auth.* / bearer.auth.*)", false
		case re.StatusCode == http.StatusForbidden:
			return "HTTP 403: the credentials may not read schemas", false
		case re.StatusCode == http.StatusTooManyRequests:
			return "HTTP 429: rate limited", false
		case re.StatusCode == http.StatusNotFound:
			return "HTTP 404 without a registry error code: is " + SettingRegistryURL + " the registry's base URL?", false
		}
		return fmt.Sprintf("HTTP %d: %s", re.StatusCode, msg), false
	}
	var refused *registryRefusal
	if errors.As(err, &refused) {
		return refused.Msg, false
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "request cancelled", false
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out (the worker's " + config.KeyRegistryTimeoutMs + " bounds a request, the whole answer included)", false
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return "the answer is not a Schema Registry response (not the JSON expected; not shown)", false
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		// Its text would repeat the URL; the cause is enough.
		return ue.Err.Error(), false
	}
	return err.Error(), false
}

// registryMessage returns the message of a registry's error JSON
// ({"error_code": …, "message": …}), cut to 200 characters with
// control characters replaced; for any other body only its size.
func registryMessage(re *sr.ResponseError) string {
	var e struct {
		ErrorCode *int    `json:"error_code"`
		Message   *string `json:"message"`
	}
	if len(re.Raw) == 0 {
		return "empty answer"
	}
	if json.Unmarshal(re.Raw, &e) != nil || e.ErrorCode == nil || e.Message == nil {
		return fmt.Sprintf("not a Schema Registry error response (%d bytes, not shown)", len(re.Raw))
	}
	msg := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, strings.TrimSpace(*e.Message))
	return record.Truncate(msg, 200)
}

// The process-wide caches: fetched schemas, referenced schemas and what
// the converters build from them, keyed by kind, registry and id. Only
// successes and errors that are the schema's fault are kept; a failed
// fetch is tried again by the next record.
var (
	cache   sync.Map // string → cacheEntry
	loading singleflight.Group
)

type cacheEntry struct {
	v   any
	err error
}

// schemaFault marks an error that follows from a schema's text, which an
// id fixes for ever: it is cached like a success.
type schemaFault struct{ err error }

func (e schemaFault) Error() string { return e.err.Error() }
func (e schemaFault) Unwrap() error { return e.err }

// badSchema returns the error of a schema that cannot be used: a bad
// record for every record written with it.
func badSchema(id uint32, format string, args ...any) error {
	return schemaFault{record.Errorf(record.ErrDecode, "schema id %d: "+format, append([]any{id}, args...)...)}
}

// cached returns the value cached under key, or loads it once for all
// concurrent callers. load runs detached from ctx's cancellation (other
// callers may wait for it; each request has its own timeout); cancelling
// ctx makes this caller stop waiting with an error wrapping
// record.ErrUnavailable.
func cached[T any](ctx context.Context, key string, load func(context.Context) (T, error)) (T, error) {
	if e, ok := cache.Load(key); ok {
		ce := e.(cacheEntry)
		v, _ := ce.v.(T)
		return v, ce.err
	}
	ch := loading.DoChan(key, func() (any, error) {
		if e, ok := cache.Load(key); ok {
			return e.(cacheEntry).v, e.(cacheEntry).err
		}
		v, err := load(context.WithoutCancel(ctx))
		var sf schemaFault
		if err == nil || errors.As(err, &sf) {
			cache.Store(key, cacheEntry{v: v, err: err})
		}
		return v, err
	})
	var zero T
	select {
	case res := <-ch:
		v, _ := res.Val.(T)
		return v, res.Err
	case <-ctx.Done():
		return zero, record.Errorf(record.ErrUnavailable, "waiting for the schema registry: %v", ctx.Err())
	}
}

// idCache is a converter's own map from schema id to what it built, in
// front of the process-wide cache: a lookup is one atomic load and a map
// read, without allocation.
type idCache[T any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[uint32]T]
}

func (c *idCache[T]) get(id uint32) (T, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[id]
		return v, ok
	}
	var zero T
	return zero, false
}

func (c *idCache[T]) put(id uint32, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	m := make(map[uint32]T, 1+func() int {
		if old == nil {
			return 0
		}
		return len(*old)
	}())
	if old != nil {
		for k, x := range *old {
			m[k] = x
		}
	}
	m[id] = v
	c.m.Store(&m)
}

// compiledSchema returns what build makes of schema id for one format
// (kind), built once per process and registry; a converter's idCache keeps
// it afterwards.
func compiledSchema[T any](ctx context.Context, r *registry, local *idCache[T], kind string, id uint32, build func(*regSchema) (T, error)) (T, error) {
	if v, ok := local.get(id); ok {
		return v, nil
	}
	v, err := cached(ctx, kind+"\x00"+r.key+"\x00"+strconv.FormatUint(uint64(id), 10), func(ctx context.Context) (T, error) {
		s, err := r.schemaByID(ctx, id)
		if err != nil {
			var zero T
			return zero, err
		}
		return build(s)
	})
	if err == nil {
		local.put(id, v)
	}
	return v, err
}
