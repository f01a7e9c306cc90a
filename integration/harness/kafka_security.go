package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/txsink/txsink/internal/testpki"
)

// KafkaSecurity describes the harness broker's secured listeners. The
// certificates are made at start (internal/testpki): a CA, the broker's
// certificate for 127.0.0.1, a client certificate the CA signed, and one
// another CA signed.
type KafkaSecurity struct {
	// SASLSSL is the bootstrap address of the SASL_SSL listener
	// (SCRAM-SHA-512 over TLS).
	SASLSSL string
	// MTLS is the bootstrap address of the SSL listener that requires a
	// client certificate the CA signed (mutual TLS).
	MTLS string
	// User and Password pass SCRAM-SHA-512 on SASLSSL.
	User, Password string
	// CAFile holds the CA certificate (PEM); ClientCertFile and
	// ClientKeyFile a client certificate it signed and its key;
	// StrangerCertFile and StrangerKeyFile one another CA signed.
	CAFile, ClientCertFile, ClientKeyFile string
	StrangerCertFile, StrangerKeyFile     string

	pki *testpki.PKI
}

// Paths of the TLS material inside the broker's container.
const (
	kafkaKeystorePath   = "/etc/kafka/txsink-tls/keystore.pem"
	kafkaTruststorePath = "/etc/kafka/txsink-tls/ca.pem"
)

// kafkaSecurityEnv configures the SCRAM (SASL_SSL) and MTLS (SSL, client
// certificate required) listeners with PEM stores. The listener names do
// not contain "SSL://", which the official image's start script would
// take for its own keystore-file convention.
func kafkaSecurityEnv() map[string]string {
	return map[string]string{
		"KAFKA_LISTENER_NAME_SCRAM_SASL_ENABLED_MECHANISMS":            "SCRAM-SHA-512",
		"KAFKA_LISTENER_NAME_SCRAM_SCRAM___SHA___512_SASL_JAAS_CONFIG": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
		"KAFKA_LISTENER_NAME_SCRAM_SSL_KEYSTORE_TYPE":                  "PEM",
		"KAFKA_LISTENER_NAME_SCRAM_SSL_KEYSTORE_LOCATION":              kafkaKeystorePath,
		"KAFKA_LISTENER_NAME_MTLS_SSL_KEYSTORE_TYPE":                   "PEM",
		"KAFKA_LISTENER_NAME_MTLS_SSL_KEYSTORE_LOCATION":               kafkaKeystorePath,
		"KAFKA_LISTENER_NAME_MTLS_SSL_TRUSTSTORE_TYPE":                 "PEM",
		"KAFKA_LISTENER_NAME_MTLS_SSL_TRUSTSTORE_LOCATION":             kafkaTruststorePath,
		"KAFKA_LISTENER_NAME_MTLS_SSL_CLIENT_AUTH":                     "required",
	}
}

// newKafkaSecurity makes the certificates in a directory that lives as
// long as the broker, and returns the files the broker's container needs.
func newKafkaSecurity(tb testing.TB, sharedMode bool) (*KafkaSecurity, []testcontainers.ContainerFile, error) {
	dir, err := os.MkdirTemp("", "txsink-kafka-tls-")
	if err != nil {
		return nil, nil, err
	}
	register(tb, sharedMode, resource{name: "kafka TLS files", terminate: func(context.Context) error { return os.RemoveAll(dir) }})
	pki, err := testpki.New(dir)
	if err != nil {
		return nil, nil, err
	}
	s := &KafkaSecurity{
		User: "txsink-test", Password: "scram-" + filepath.Base(dir),
		CAFile: pki.CAFile, ClientCertFile: pki.ClientCertFile, ClientKeyFile: pki.ClientKeyFile,
		StrangerCertFile: filepath.Join(dir, "stranger.pem"), StrangerKeyFile: filepath.Join(dir, "stranger-key.pem"),
		pki: pki,
	}
	if err := testpki.WritePair(pki.Stranger, s.StrangerCertFile, s.StrangerKeyFile); err != nil {
		return nil, nil, err
	}
	keystore, err := testpki.PKCS8Bundle(pki.Server)
	if err != nil {
		return nil, nil, err
	}
	ca, err := os.ReadFile(pki.CAFile)
	if err != nil {
		return nil, nil, err
	}
	return s, []testcontainers.ContainerFile{containerFile(keystore, kafkaKeystorePath), containerFile(ca, kafkaTruststorePath)}, nil
}

// addUser creates the SCRAM-SHA-512 user through the plaintext listener.
func (s *KafkaSecurity) addUser(ctx context.Context, bootstrap string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: s.User, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: s.Password,
	}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("creating SCRAM user %s: %w", s.User, err)
	}
	return nil
}

// SASLOpts returns franz-go options that pass the SASL_SSL listener.
func (s *KafkaSecurity) SASLOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: s.pki.Pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()),
	}
}

// MTLSOpts returns franz-go options that pass the mutual TLS listener.
func (s *KafkaSecurity) MTLSOpts() []kgo.Opt {
	return []kgo.Opt{kgo.DialTLSConfig(s.pki.ClientConfig(&s.pki.Client))}
}

// SASLSettings returns txsink worker settings (a worker file's keys) that
// pass the SASL_SSL listener.
func (s *KafkaSecurity) SASLSettings() map[string]string {
	return map[string]string{
		"bootstrap.servers":       s.SASLSSL,
		"kafka.security.protocol": "SASL_SSL",
		"kafka.ssl.ca.file":       s.CAFile,
		"kafka.sasl.mechanism":    "SCRAM-SHA-512",
		"kafka.sasl.username":     s.User,
		"kafka.sasl.password":     s.Password,
	}
}

// MTLSSettings returns txsink worker settings that pass the mutual TLS
// listener.
func (s *KafkaSecurity) MTLSSettings() map[string]string {
	return map[string]string{
		"bootstrap.servers":       s.MTLS,
		"kafka.security.protocol": "SSL",
		"kafka.ssl.ca.file":       s.CAFile,
		"kafka.ssl.cert.file":     s.ClientCertFile,
		"kafka.ssl.key.file":      s.ClientKeyFile,
	}
}
