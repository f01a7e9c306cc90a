package clickhouse

import "crypto/tls"

// tlsConfig is the TLS configuration of secure=true: the system's roots.
func tlsConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
