package configlog

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Records of the config and status topics are signed: the cluster's
// leader writes a random key to the config topic once (a cluster-key-…
// record, the first of which wins), and every config and status record
// written after it carries an HMAC-SHA256 over its topic, key and value
// in the SignatureHeader header. Readers apply only records with a valid
// signature once the key exists; a record that reached the topics any
// other way (a connector's dead letters, a producer of the cluster's
// Kafka) has none and is ignored and counted. Records before the key
// record, in the config topic, are those of a cluster that predates
// signing (an upgrade) and are read as before. See docs/security.md,
// "Internal topics".

// SignatureHeader is the record header holding a record's signature.
const SignatureHeader = "txsink-signature"

// clusterKeyPrefix is the key prefix of the key records (each with a
// random suffix, so that compaction keeps the first).
const clusterKeyPrefix = "cluster-key-"

type keyValue struct {
	V         int       `json:"v"`
	Algorithm string    `json:"algorithm"`
	Key       string    `json:"key"` // base64
	Created   time.Time `json:"created"`
}

const keyAlgorithm = "HmacSHA256"

// Keyring holds the cluster's signing key once the config topic's reader
// found it. The key never leaves it: no method returns it, and its
// String method hides it. Its methods are safe for concurrent use.
type Keyring struct {
	mu  sync.Mutex
	key []byte
	set chan struct{} // closed when key is set
}

// NewKeyring returns an empty keyring.
func NewKeyring() *Keyring { return &Keyring{set: make(chan struct{})} }

// String hides the key.
func (k *Keyring) String() string { return "configlog.Keyring{[hidden]}" }

// Known reports whether the cluster's key was read.
func (k *Keyring) Known() bool {
	if k == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.key != nil
}

// setKey sets the key unless one is set; it reports whether it did.
func (k *Keyring) setKey(b []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return false
	}
	k.key = b
	close(k.set)
	return true
}

// wait waits until the key is known or ctx ends.
func (k *Keyring) wait(ctx context.Context) error {
	select {
	case <-k.set:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mac returns the signature of a record of topic (nil when no key is
// known). A tombstone (nil value) and an empty value sign differently.
func (k *Keyring) mac(topic string, key, value []byte) []byte {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	secret := k.key
	k.mu.Unlock()
	if secret == nil {
		return nil
	}
	h := hmac.New(sha256.New, secret)
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	h.Write([]byte("txsink-internal-record-v1"))
	field([]byte(topic))
	field(key)
	if value == nil {
		h.Write([]byte{0})
	} else {
		h.Write([]byte{1})
		field(value)
	}
	return h.Sum(nil)
}

// sign adds the record's signature header (none before a key is known).
func (k *Keyring) sign(r *kgo.Record) {
	if m := k.mac(r.Topic, r.Key, r.Value); m != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: SignatureHeader, Value: m})
	}
}

// Reasons a record is refused (the reason label of the metric).
const (
	ReasonUnsigned     = "unsigned"
	ReasonBadSignature = "bad_signature"
	ReasonSecondKey    = "second_key"
	ReasonBadKey       = "bad_key"
)

// verify checks a record's signature against the known key: "" when it is
// valid, else the reason it is refused.
func (k *Keyring) verify(topic string, r *kgo.Record) string {
	var sig []byte
	n := 0
	for _, h := range r.Headers {
		if h.Key == SignatureHeader {
			sig, n = h.Value, n+1
		}
	}
	switch {
	case n == 0:
		return ReasonUnsigned
	case n > 1:
		return ReasonBadSignature
	}
	want := k.mac(topic, r.Key, r.Value)
	if want == nil || !hmac.Equal(sig, want) {
		return ReasonBadSignature
	}
	return ""
}

// signed reports whether the record carries a signature header.
func signed(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == SignatureHeader {
			return true
		}
	}
	return false
}

// PutClusterKey is the record of a new random signing key. The leader
// writes it once, when the config topic has none; readers take the first
// one in the topic.
func PutClusterKey() (Record, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Record{}, fmt.Errorf("generating the cluster's signing key: %w", err)
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return Record{}, fmt.Errorf("generating the cluster's signing key: %w", err)
	}
	v := encode(keyValue{V: Version, Algorithm: keyAlgorithm, Key: base64.StdEncoding.EncodeToString(b), Created: time.Now().UTC()})
	return Record{Key: clusterKeyPrefix + hex.EncodeToString(id), Value: v}, nil
}

// parseKey reads a key record's value. Its errors never quote the value.
func parseKey(val []byte) ([]byte, error) {
	if val == nil {
		return nil, errors.New("cluster key tombstone")
	}
	var v keyValue
	if err := decode(val, &v); err != nil {
		if errors.Is(err, ErrVersion) {
			return nil, err
		}
		return nil, errors.New("cluster key record is not a JSON object of this txsink")
	}
	if v.Algorithm != keyAlgorithm {
		return nil, fmt.Errorf("cluster key algorithm %q is not %s", v.Algorithm, keyAlgorithm)
	}
	b, err := base64.StdEncoding.DecodeString(v.Key)
	if err != nil || len(b) < 32 {
		return nil, errors.New("cluster key is not 32 or more bytes of base64")
	}
	return b, nil
}

// Rejected counts, per reason, the records a log ignored because they were
// not signed by the cluster.
type Rejected map[string]int64

func (r Rejected) clone() Rejected {
	out := Rejected{}
	for k, v := range r {
		out[k] = v
	}
	return out
}
