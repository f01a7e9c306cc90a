#!/usr/bin/env bash
# Regenerates expected.json: runs cases.json through Kafka Connect's and
# Debezium's own classes (Java 17+ and Maven; the versions are in pom.xml).
# conformance_test.go compares txsink's transforms with it.
set -euo pipefail
cd "$(dirname "$0")"
cp=$(mktemp)
trap 'rm -f "$cp"' EXIT
mvn -q -B dependency:build-classpath -Dmdep.outputFile="$cp" >/dev/null
java -cp "$(cat "$cp")" Harness.java cases.json > expected.json
echo "wrote $(pwd)/expected.json"
