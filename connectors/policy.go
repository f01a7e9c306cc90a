package connectors

import (
	"net"
	"strings"

	"github.com/txsink/txsink/connectors/convert"
)

// Policy is what a worker lets a connector configuration make it do, beyond
// what the configuration itself says. The zero value is the strict policy
// of a worker that takes configurations from REST clients: no Unix-domain
// sockets, none of the worker's environment credentials, no test-only
// switches. See docs/security.md.
type Policy struct {
	// UnixSockets lets a connection string name a Unix-domain socket (a
	// host that is a directory, or an empty host, which the PostgreSQL
	// driver turns into the local socket). Over a socket the database may
	// authenticate the worker's OS user without a password.
	UnixSockets bool
	// EnvCredentialHosts lists the "host" or "host:port" entries (or "*"
	// for any) a connector may use the worker's environment credentials
	// for: PGUSER and the OS user name, PGPASSWORD, the password file
	// (PGPASSFILE, ~/.pgpass), a service file's password, and client
	// certificates (PGSSLCERT/PGSSLKEY, ~/.postgresql). Empty: never;
	// a connector then authenticates only with what its configuration
	// holds.
	EnvCredentialHosts []string
	// UnsafeTestSettings accepts test-only settings such as
	// txsink.test.unsafe.disable.fencing. Only a process started with an
	// explicit test flag sets it.
	UnsafeTestSettings bool
	// ReservedTopics maps the worker's own topics (distributed mode's
	// config.storage.topic, status.storage.topic and offset.storage.topic)
	// to the setting that names each: no connector may write dead letters
	// to them or consume them (config.CheckTopicNames), nor to or from "."
	// and "..", nor names starting "__" (Kafka's own topics).
	ReservedTopics map[string]string
	// Registry is what the converters' Schema Registry clients may do:
	// the hosts they may reach, how much of an answer they read, how long
	// a request may take (schema.registry.* worker settings).
	Registry convert.RegistryPolicy
}

// EnvCredentialsFor reports whether every one of the endpoints
// ("host:port") may receive the worker's environment credentials.
func (p Policy) EnvCredentialsFor(endpoints []string) bool {
	if len(endpoints) == 0 {
		return false
	}
	for _, ep := range endpoints {
		if !p.envCredentialsFor(ep) {
			return false
		}
	}
	return true
}

func (p Policy) envCredentialsFor(endpoint string) bool {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		host, port = endpoint, ""
	}
	for _, e := range p.EnvCredentialHosts {
		e = strings.TrimSpace(e)
		if e == "*" {
			return true
		}
		eh, ep, err := net.SplitHostPort(e)
		if err != nil {
			eh, ep = strings.Trim(e, "[]"), ""
		}
		if strings.EqualFold(eh, host) && (ep == "" || ep == port) {
			return true
		}
	}
	return false
}
