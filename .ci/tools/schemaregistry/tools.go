//go:build tools

// Package tools pins the Schema Registry server that the integration tests
// run against (AxonOps Schema Registry, a Confluent-API registry with
// in-memory storage). It is a module of its own so that the server and its
// dependencies never enter txsink's go.mod; .ci/run builds it into bin/.
package tools

import _ "github.com/axonops/axonops-schema-registry/cmd/schema-registry"
