// Package deploy holds txsink's deployment files — the container image
// (Dockerfile), a docker-compose.yml, Kubernetes manifests and a systemd
// unit — and the tests that check them: every Kubernetes manifest decodes
// strictly into the k8s.io/api types, the compose file into the compose
// specification's shape, and both say what the image expects (probes on
// /health, a non-root user). It has no code of its own.
package deploy
